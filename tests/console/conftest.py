"""Fixtures: a gateway with jobs in it, and the console in front of it.

`gateway` is, here, the in-memory FakeGateway (fast, and it counts its
StreamStatus calls); the browser tests override it with a real `jobgate
serve` (tests/console/browser/conftest.py, tests/console/serve_gateway.py).
Both give a `target`, accept the tokens of `fake_gateway.TOKENS` and have the
driver methods (`create`, `claim`, `report`, `finish`, `status`).

`console` builds the app for Starlette's TestClient (in-process, one portal
for the test); `live_console` serves it on a loopback port from a thread of
its own, for event streams and the browser.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import replace
from typing import Any, Protocol

import pytest
from starlette.testclient import TestClient

from jobgate.client import ConnectionConfig
from jobgate.console.app import build_app
from jobgate.console.passwords import Cost, PasswordHash, Users, hash_password
from jobgate.console.server import ConsoleServer
from jobgate.console.settings import AuthMode, ConsoleSettings, Listen
from tests.console.fake_gateway import FakeGatewayThread

#: A cheap scrypt cost: the format and the check are what the tests are about.
TEST_COST = Cost(log2_n=4, r=8, p=1)
PASSWORD = "correct horse battery staple"


class Gateway(Protocol):
    """What the console fixtures need of a gateway: where it listens."""

    @property
    def target(self) -> str: ...


@pytest.fixture
def gateway() -> Iterator[FakeGatewayThread]:
    fake = FakeGatewayThread().start()
    yield fake
    fake.stop()


def settings_for_target(
    target: str, token: str | None = "admin-token", **overrides: Any
) -> ConsoleSettings:
    base = ConsoleSettings(
        gateway=ConnectionConfig(target=target, token=token), listen=Listen("127.0.0.1", 0)
    )
    return replace(base, **overrides)


def settings_for(
    gateway: Gateway, token: str | None = "admin-token", **overrides: Any
) -> ConsoleSettings:
    return settings_for_target(gateway.target, token, **overrides)


def users(**passwords: str) -> Users:
    return Users(
        {name: PasswordHash.parse(hash_password(pw, TEST_COST)) for name, pw in passwords.items()}
    )


def password_settings(gateway: Gateway, **overrides: Any) -> ConsoleSettings:
    return settings_for(gateway, auth=AuthMode.PASSWORD, users=users(ada=PASSWORD), **overrides)


ConsoleFactory = Callable[..., TestClient]


@pytest.fixture
def console(gateway: Gateway) -> Iterator[ConsoleFactory]:
    """`console(**settings)` -> a TestClient of a console in front of `gateway`."""
    opened: list[TestClient] = []

    def make(settings: ConsoleSettings | None = None, **overrides: Any) -> TestClient:
        client = TestClient(
            build_app(settings or settings_for(gateway, **overrides)),
            base_url="http://127.0.0.1:8080",
            follow_redirects=False,
        )
        client.__enter__()
        opened.append(client)
        return client

    yield make
    for client in opened:
        client.__exit__(None, None, None)


class ConsoleThread:
    """A ConsoleServer on 127.0.0.1:<free port>, on its own loop in a thread."""

    def __init__(self, settings: ConsoleSettings) -> None:
        self.server = ConsoleServer(settings)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.url = ""

    def start(self) -> ConsoleThread:
        self._thread.start()
        self.run(self.server.start())
        self.url = self.server.url
        return self

    def run(self, coroutine: Any) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        return future.result(timeout=30)

    def stop(self) -> None:
        self.run(self.server.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


LiveFactory = Callable[..., ConsoleThread]


@pytest.fixture
def live_console(gateway: Gateway) -> Iterator[LiveFactory]:
    """`live_console(**settings)` -> a served console in front of `gateway`."""
    started: list[ConsoleThread] = []

    def make(settings: ConsoleSettings | None = None, **overrides: Any) -> ConsoleThread:
        thread = ConsoleThread(settings or settings_for(gateway, **overrides)).start()
        started.append(thread)
        return thread

    yield make
    for thread in started:
        thread.stop()
