"""Connection settings shared by JobClient and the worker daemon.

Both talk gRPC with the same credentials story: `authorization: Bearer
<token>` when a token is set, `x-jobgate-tenant` in open mode, optional TLS
(server CA, client certificate for mutual TLS). Environment defaults:
JOBGATE_TARGET, JOBGATE_TOKEN, JOBGATE_TENANT.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

import grpc

DEFAULT_TARGET = "127.0.0.1:50051"
# Payloads may be several MiB (server default cap 4 MiB) and gRPC's own default
# receive limit is exactly 4 MiB, so raise it on our side.
MAX_MESSAGE_BYTES = 64 * 1024 * 1024
_CHANNEL_OPTIONS = (
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    # Reconnect fast after a gateway restart instead of gRPC's default 20 s+ back-off.
    ("grpc.initial_reconnect_backoff_ms", 200),
    ("grpc.min_reconnect_backoff_ms", 200),
    ("grpc.max_reconnect_backoff_ms", 5000),
)


@dataclass(frozen=True)
class ConnectionConfig:
    """Where and how to connect; `from_env` fills what the caller left out."""

    target: str = DEFAULT_TARGET
    token: str | None = None
    tenant: str | None = None
    #: PEM of the CA that signed the server's certificate; enables TLS.
    tls_ca: bytes | None = None
    #: PEM client certificate chain and key, for mutual TLS.
    tls_cert: bytes | None = None
    tls_key: bytes | None = None
    #: TLS with the system's root CAs (implied by tls_ca).
    tls: bool = False

    @classmethod
    def from_env(
        cls,
        target: str | None = None,
        token: str | None = None,
        tenant: str | None = None,
        *,
        default_target: str = DEFAULT_TARGET,
    ) -> ConnectionConfig:
        """Explicit arguments first, then JOBGATE_TARGET / JOBGATE_TOKEN / JOBGATE_TENANT."""
        return cls(
            target=target or os.environ.get("JOBGATE_TARGET") or default_target,
            token=token or os.environ.get("JOBGATE_TOKEN") or None,
            tenant=tenant or os.environ.get("JOBGATE_TENANT") or None,
        )

    def with_tls_files(
        self, ca: str | None = None, cert: str | None = None, key: str | None = None
    ) -> ConnectionConfig:
        """The same config with TLS material read from PEM files."""
        if bool(cert) != bool(key):
            raise ValueError("--tls-cert and --tls-key go together")
        return replace(
            self,
            tls_ca=Path(ca).read_bytes() if ca else self.tls_ca,
            tls_cert=Path(cert).read_bytes() if cert else self.tls_cert,
            tls_key=Path(key).read_bytes() if key else self.tls_key,
            tls=self.tls or bool(ca or cert),
        )

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The per-call metadata carrying the caller's identity."""
        pairs: list[tuple[str, str]] = []
        if self.token:
            pairs.append(("authorization", f"Bearer {self.token}"))
        if self.tenant:
            pairs.append(("x-jobgate-tenant", self.tenant))
        return tuple(pairs)

    def open_channel(self) -> grpc.aio.Channel:
        """A new grpc.aio channel; call inside a running event loop."""
        if not (self.tls or self.tls_ca or self.tls_cert):
            return grpc.aio.insecure_channel(self.target, options=_CHANNEL_OPTIONS)
        credentials = grpc.ssl_channel_credentials(
            root_certificates=self.tls_ca,
            private_key=self.tls_key,
            certificate_chain=self.tls_cert,
        )
        return grpc.aio.secure_channel(self.target, credentials, options=_CHANNEL_OPTIONS)
