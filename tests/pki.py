"""Certificates for every TLS test, made once per session with openssl.

A throwaway CA, a server certificate for 127.0.0.1 and localhost, and a
client certificate (clientAuth) for mutual TLS. The `pki` fixture in
tests/conftest.py makes them once. Without openssl the TLS tests skip, and
under JOBGATE_REQUIRE_TOOLS=1 (CI) they fail: the rule of tests/deploy/tools.py.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import grpc

from tests.deploy.tools import require_tool

# EC keys: much faster to generate than RSA on a loaded machine.
EC_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
DAYS = ("-days", "2")
SERVER_EXTENSIONS = "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
CLIENT_EXTENSIONS = "subjectAltName=DNS:localhost\nextendedKeyUsage=clientAuth\n"


@dataclass(frozen=True)
class Pki:
    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.pem"

    @property
    def server_cert(self) -> Path:
        return self.directory / "server.pem"

    @property
    def server_key(self) -> Path:
        return self.directory / "server.key"

    @property
    def client_cert(self) -> Path:
        return self.directory / "client.pem"

    @property
    def client_key(self) -> Path:
        return self.directory / "client.key"

    def client_credentials(self, with_cert: bool = True) -> grpc.ChannelCredentials:
        """Trust the CA; present the client certificate unless `with_cert` is False."""
        if not with_cert:
            return grpc.ssl_channel_credentials(self.ca.read_bytes())
        return grpc.ssl_channel_credentials(
            self.ca.read_bytes(), self.client_key.read_bytes(), self.client_cert.read_bytes()
        )

    def server_credentials(self, require_client_cert: bool) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials(
            [(self.server_key.read_bytes(), self.server_cert.read_bytes())],
            root_certificates=self.ca.read_bytes(),
            require_client_auth=require_client_cert,
        )


def make_pki(directory: Path) -> Pki:
    """Issue the CA and both certificates into `directory` (skip or fail without openssl)."""
    openssl = require_tool("openssl", "apt-get install openssl")
    directory.mkdir(parents=True, exist_ok=True)

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], cwd=directory, check=True, capture_output=True, timeout=60)

    run("req", "-x509", *EC_KEY, "-keyout", "ca.key", "-out", "ca.pem", *DAYS,
        "-subj", "/CN=jobgate-test-ca")  # fmt: skip
    for name, extensions in (("server", SERVER_EXTENSIONS), ("client", CLIENT_EXTENSIONS)):
        (directory / f"{name}.ext").write_text(extensions)
        run("req", *EC_KEY, "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/CN={name}")  # fmt: skip
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.pem", "-extfile", f"{name}.ext", *DAYS)  # fmt: skip
    return Pki(directory)
