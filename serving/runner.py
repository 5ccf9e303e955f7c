"""Runs a server process: open the store, start the services, drain on SIGTERM/SIGINT.

The services come in as `Builder`s (jobgate.cli._servers composes them), so
this module never imports the servers it runs. Each process also serves
/metrics, runs the recovery loop, the audit log and the store probe.
Shutdown: health NOT_SERVING, drain (new calls UNAVAILABLE SHUTTING_DOWN,
long polls and streams return), wait for in-flight calls up to
--grace-period, stop the servers, stop background tasks, close the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TextIO
from wsgiref.simple_server import WSGIServer

import grpc.aio
from prometheus_client import start_http_server

from serving.audit_log import AuditLog
from serving.auth import Authenticator, AuthFileError
from serving.grpc_server import ServerStartError
from serving.instrumented import count_store_errors
from serving.metrics import Metrics
from serving.recovery import Recovery, StoreProbe
from serving.settings import Address, ServerSettings
from serving.shared import Serving
from store import StoreError, open_store
from store.journal import DataDirRefused, collector
from store.protocol import Store

log = logging.getLogger("jobgate.server")

STORE_OPEN_TIMEOUT = 5.0


class StartError(Exception):
    """The process cannot start; the message is the one line the user sees."""


@dataclass(frozen=True)
class Listener:
    name: str  # "job" or "worker"
    server: grpc.aio.Server
    address: Address


BuildServer = Callable[[Serving, Address], tuple[grpc.aio.Server, int]]


@dataclass(frozen=True)
class Builder:
    """One service of a process: its name, how to build it, where it listens."""

    name: str  # "job" or "worker"
    build: BuildServer
    address: Address


def hears_changes(services: Sequence[str]) -> bool:
    """Whether a process of `services` subscribes to the changes channel.

    Only JobService ("job") waits for changes (StreamStatus watchers); the
    worker-server's calls (claims) wait for ready messages alone, so it never
    reads the others (docs/redis-layout.md, "Wake-ups across replicas").
    Both need the ready channel: claims, and a watcher's queue position
    grows when a job is queued ahead.
    """
    return "job" in services


def durable_dir(settings: ServerSettings) -> str | None:
    """The embedded store's --data-dir; None on Redis (where --data-dir is ignored)."""
    return None if settings.redis_url else settings.data_dir


async def open_configured_store(settings: ServerSettings, hear_changes: bool = True) -> Store:
    data_dir = durable_dir(settings)
    try:
        store = open_store(
            settings.redis_url,
            settings.store_settings(),
            partition=settings.redis_partition,
            partitions=settings.redis_partitions,
            hear_changes=hear_changes,
            data_dir=data_dir,
            data_sync=settings.data_sync,
        )
    except (ValueError, ImportError) as error:
        raise StartError(f"--redis-url: {error}") from None
    # Loading a data directory takes as long as it holds jobs (seconds for a
    # million): only a Redis that does not answer is given up on.
    timeout = None if data_dir else STORE_OPEN_TIMEOUT
    try:
        await asyncio.wait_for(store.open(), timeout)
    except DataDirRefused as error:
        raise StartError(error.message) from None
    except (StoreError, OSError, TimeoutError) as error:
        where = settings.redis_url or data_dir or "the embedded store"
        raise StartError(f"cannot open {where}: {error or type(error).__name__}") from None
    return store


#: Something a process runs beside its gRPC servers once they listen (the
#: console of `serve --console-listen`): entered after the servers start,
#: left when the process stops. Raises StartError when it cannot start.
Sidecar = Callable[["Process"], contextlib.AbstractAsyncContextManager[object]]


class Process:
    """One server process; `run()` returns the exit code after a drain."""

    def __init__(
        self,
        command: str,
        settings: ServerSettings,
        builders: Sequence[Builder],
        out: TextIO | None = None,
        install_signals: bool = True,
        sidecars: Sequence[Sidecar] = (),
    ) -> None:
        self.command = command
        self.settings = settings
        self._builders = tuple(builders)
        self._sidecars = tuple(sidecars)
        self._out = out or sys.stdout
        self._install = install_signals
        self.started = asyncio.Event()
        self._stop = asyncio.Event()
        self.listeners: list[Listener] = []
        self.metrics_address: Address | None = None
        #: More addresses the listening line names (a sidecar's, e.g. console=...).
        self.announced: dict[str, Address] = {}
        self.serving: Serving | None = None
        self._collector_paused = False

    def request_stop(self) -> None:
        if self._stop.is_set():
            log.warning("already draining; waiting for the grace period")
        self._stop.set()

    async def run(self) -> int:
        try:
            auth = Authenticator.from_file(self.settings.auth_file)
        except AuthFileError as error:
            raise StartError(str(error)) from None
        metrics = Metrics()
        changes = hears_changes([builder.name for builder in self._builders])
        # A process of its own keeps the collector off from before a data
        # directory's load until what it loaded is frozen (_serve_started): the
        # first collections after it would walk every loaded job, up to three
        # times (once per generation), before the first call is answered.
        paused = self._install and durable_dir(self.settings) is not None
        self._collector_paused = paused
        if paused:
            collector.freeze_at_resume()
            collector.pause()
        try:
            store = await open_configured_store(self.settings, changes)
        except BaseException:
            self._resume_collector()
            raise
        store = count_store_errors(store, metrics)
        try:
            self.serving = Serving(self.settings, store, auth, metrics)
            return await self._serve(self.serving)
        finally:
            self._resume_collector()
            await store.close()

    def _resume_collector(self) -> None:
        if self._collector_paused:
            self._collector_paused = False
            collector.resume()

    async def _serve(self, serving: Serving) -> int:
        try:
            for builder in self._builders:
                server, port = builder.build(serving, builder.address)
                address = Address(builder.address.host, port)
                self.listeners.append(Listener(builder.name, server, address))
        except ServerStartError as error:
            raise StartError(str(error)) from None
        loop = asyncio.get_running_loop()
        serving.metrics.watch_store(serving.store, loop, serving.auth.named_pools())
        httpd = self._start_metrics(serving.metrics)
        try:
            return await self._run_started(serving)
        finally:
            if httpd is not None:
                httpd.shutdown()
                httpd.server_close()

    def _start_metrics(self, metrics: Metrics) -> WSGIServer | None:
        address = self.settings.metrics_listen
        if address is None:
            return None
        try:
            httpd, _ = start_http_server(address.port, address.host, registry=metrics.registry)
        except OSError as error:
            raise StartError(f"cannot serve metrics on {address}: {error.strerror}") from None
        self.metrics_address = Address(address.host, int(httpd.server_port))
        return httpd

    async def _run_started(self, serving: Serving) -> int:
        probe = StoreProbe(serving.store, serving.metrics, serving.health)
        await probe.step()
        for listener in self.listeners:
            await listener.server.start()
        async with contextlib.AsyncExitStack() as sidecars:
            for sidecar in self._sidecars:
                await sidecars.enter_async_context(sidecar(self))
            return await self._serve_started(serving, probe)

    async def _serve_started(self, serving: Serving, probe: StoreProbe) -> int:
        self._announce(serving)
        if self._install:  # a process of its own, not a test's in-process server
            self._install_signals()
            # Everything built so far lives as long as the process: out of the
            # collector's sight, a full collection no longer walks it. Each was
            # a 14-22 ms pause and a burst of late claims (docs/performance.md).
            # After a data directory's load a collection would itself walk every
            # job it loaded (about a second at a million, while calls wait), and
            # the load leaves no garbage: freeze them as they are.
            if durable_dir(self.settings) is None:
                gc.collect()
            gc.freeze()
            self._resume_collector()  # paused since before a data directory's load (run)
        self.started.set()
        stop_background = asyncio.Event()
        recovery = Recovery(serving.store, serving.metrics)
        background = [
            asyncio.create_task(recovery.run(stop_background)),
            asyncio.create_task(probe.run(stop_background)),
        ]
        if self.settings.log_transitions:
            audit = AuditLog(serving.store, recovery.leadership)
            background.append(asyncio.create_task(audit.run(stop_background)))
        await self._stop.wait()
        await self._drain(serving)
        stop_background.set()
        await asyncio.gather(*background, return_exceptions=True)
        log.info("stopped")
        return 0

    def _announce(self, serving: Serving) -> None:
        parts = [f"{listener.name}={listener.address}" for listener in self.listeners]
        parts.append(f"metrics={self.metrics_address or 'off'}")
        parts += [f"{name}={address}" for name, address in self.announced.items()]
        line = f"jobgate {self.command} listening {' '.join(parts)}"
        print(line, file=self._out, flush=True)
        log.info(
            "listening",
            extra={
                **{listener.name: str(listener.address) for listener in self.listeners},
                "metrics": str(self.metrics_address or "off"),
                "store": "redis" if self.settings.redis_url else "embedded",
            },
        )
        self._announce_store()
        if serving.auth.open:
            log.warning(
                "running open: no --auth-file, so any caller is accepted; the tenant "
                "comes from x-jobgate-tenant metadata (else 'default')"
            )

    def _announce_store(self) -> None:
        if self.settings.redis_url:
            return
        data_dir = durable_dir(self.settings)
        if data_dir is None:
            log.warning(
                "the embedded store is in memory: every job is lost when this process "
                "stops; --data-dir DIR keeps them on disk"
            )
        else:
            log.info(
                "the embedded store is kept on disk",
                extra={"data_dir": data_dir, "data_sync": self.settings.data_sync},
            )

    def _install_signals(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, self.request_stop)

    async def _drain(self, serving: Serving) -> None:
        grace = self.settings.grace_period.total_seconds()
        deadline = time.monotonic() + grace
        log.info(
            "draining", extra={"grace_seconds": grace, "in_flight": serving.lifecycle.in_flight}
        )
        await serving.health.shut_down()
        serving.lifecycle.start_drain()
        idle = await serving.lifecycle.wait_idle(grace)
        if not idle:
            log.warning("grace period over with calls in flight; cancelling them")
        # Only untracked calls (health Watch, reflection) may remain: a short grace.
        remaining = min(max(0.0, deadline - time.monotonic()), 0.5) if idle else 0.0
        await asyncio.gather(*(listener.server.stop(remaining) for listener in self.listeners))
