"""Builds one grpc.aio server: interceptor, health, reflection, options, port, TLS.

Both services use this, so every jobgate gRPC server behaves alike.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from pathlib import Path

import grpc
import grpc.aio
from grpc_health.v1 import health as grpc_health
from grpc_health.v1 import health_pb2_grpc
from grpc_health.v1._async import HealthServicer
from grpc_reflection.v1alpha import reflection

from serving.interceptor import ServingInterceptor
from serving.settings import Address, ServerSettings
from serving.shared import Serving

# Room above the payload limit, so an oversized payload reaches validation
# (INVALID_ARGUMENT naming the field) instead of failing in transport.
_MIN_RECEIVE_BYTES = 64 * 1024 * 1024
# gRPC core holds calls that arrived before the Python server picked them up
# in a backlog, and past its soft limit (1000 by default) drops a random share
# of new ones as CANCELLED before any handler runs. 2,000 StreamStatus calls
# opened at once lost ~9% that way, so the backlog may hold far more than a
# burst of streams and long polls; the asyncio loop still takes them in order.
_MAX_PENDING_CALLS = 50_000


class ServerStartError(Exception):
    """The server cannot start (port taken, unreadable TLS files); one-line message."""


def options(settings: ServerSettings) -> list[tuple[str, int]]:
    receive = max(_MIN_RECEIVE_BYTES, 2 * settings.max_payload_bytes + 1024 * 1024)
    return [
        ("grpc.max_receive_message_length", receive),
        ("grpc.max_send_message_length", -1),
        # Without this a second server could silently share a taken port.
        ("grpc.so_reuseport", 0),
        # Let clients keep idle long-poll connections alive with pings.
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", 5000),
        ("grpc.server.max_pending_requests", _MAX_PENDING_CALLS),
        ("grpc.server.max_pending_requests_hard_limit", 2 * _MAX_PENDING_CALLS),
    ]


def new_server(
    serving: Serving,
    address: Address,
    add_service: Callable[[grpc.aio.Server], None],
    service_names: Sequence[str],
) -> tuple[grpc.aio.Server, int]:
    """A server with the service, health and reflection, bound (not started)."""
    server = grpc.aio.server(
        interceptors=[ServingInterceptor(serving.lifecycle, serving.metrics)],
        options=options(serving.settings),
    )
    add_service(server)
    health = HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    serving.health.add(health, service_names)
    reflection.enable_server_reflection(
        [*service_names, grpc_health.SERVICE_NAME, reflection.SERVICE_NAME], server
    )
    return server, bind(server, address, serving.settings)


def bind(server: grpc.aio.Server, address: Address, settings: ServerSettings) -> int:
    _check_free(address)
    try:
        if settings.tls_cert is None:
            port = server.add_insecure_port(str(address))
        else:
            port = server.add_secure_port(str(address), _credentials(settings))
    except RuntimeError as error:
        raise ServerStartError(f"cannot listen on {address}: {error}") from None
    if port == 0:
        raise ServerStartError(f"cannot listen on {address}")
    return port


def _check_free(address: Address) -> None:
    """Fail early, in one line, on a taken port (gRPC core would also log to stderr)."""
    try:
        family = (
            socket.AF_INET6 if ipaddress.ip_address(address.host).version == 6 else socket.AF_INET
        )
    except ValueError:
        return  # a host name: leave it to gRPC
    if address.port == 0:
        return
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address.host, address.port))
        except OSError as error:
            raise ServerStartError(f"cannot listen on {address}: {error.strerror}") from None


def _credentials(settings: ServerSettings) -> grpc.ServerCredentials:
    assert settings.tls_cert is not None and settings.tls_key is not None
    cert = _read(settings.tls_cert, "--tls-cert")
    key = _read(settings.tls_key, "--tls-key")
    client_ca = _read(settings.tls_client_ca, "--tls-client-ca") if settings.tls_client_ca else None
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=client_ca, require_client_auth=client_ca is not None
    )


def _read(path: str, flag: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise ServerStartError(f"{flag}: cannot read {path}: {error.strerror}") from None
