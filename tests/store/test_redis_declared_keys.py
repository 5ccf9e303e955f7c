"""Every key a script touches is in its KEYS (DESIGN "Redis topologies").

On Redis Cluster a script that touches a key it did not declare fails
halfway while the key's slot migrates, or reads nil for a key already moved.
Two checks: statically, no Lua spells or builds a key name and every
script's header lists the KEYS[i] it uses; at run time, a MONITOR connection
records each EVALSHA with its KEYS and the commands the script ran, and
`COMMAND GETKEYS` names the keys of each: all must be among the KEYS.
"""

from __future__ import annotations

import re
import socket
import threading
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis as AsyncRedis
from redis.exceptions import ResponseError

from store.errors import StoreError
from store.model import (
    ClaimedJob,
    FilterTerm,
    GroupSpec,
    JobFilter,
    JobSpec,
    JobStatus,
    ResultReport,
    StoreSettings,
    SubmitRequest,
    WorkerSighting,
)
from store.policy import lua_policy
from store.redis import RedisStore
from store.redis import partition as redis_partition
from store.redis.notify import READY, Notifier
from store.redis.scripts import read_script, script_names
from tests.helpers import assert_eventually
from tests.redis_server import RedisServer

LUA_DIR = Path(__file__).resolve().parents[2] / "store" / "lua"
LUA_FILES = sorted(LUA_DIR.rglob("*.lua"))
TENANT = "acme"

# -- static ---------------------------------------------------------------------

# Fragments of key names (store/keys.py) that no Lua may spell.
KEY_FRAGMENTS = ("jobgate:", "job:", "queue:", "idem:", "op:", ":payload", ":result",
                 ":children", ":held", "prefix", "PREFIX")  # fmt: skip
# redis.call('CMD', <first argument built with ..>: a key name built in Lua.
BUILT_KEY = re.compile(r"redis\.call\(\s*'[A-Za-z]+'\s*,\s*[^,)]*\.\.")
USED_KEY = re.compile(r"KEYS\[(\d+)\]")
LISTED_KEYS = re.compile(r"KEYS\[(\d+)(\.\.)?(\d*)\]")


def _code(text: str) -> str:
    """Lua without its comments."""
    text = re.sub(r"--\[\[.*?\]\]", "", text, flags=re.DOTALL)
    return re.sub(r"--.*$", "", text, flags=re.MULTILINE)


def _header(text: str) -> str:
    """A script's --[[ ... ]] header (after a shebang), or an include's leading comment lines."""
    if text.startswith("#!"):
        text = text.split("\n", 1)[1]
    if text.startswith("--[["):
        return text.split("]]", 1)[0]
    lines = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line)
    return "\n".join(lines)


def _listed(header: str) -> list[tuple[int, int | None]]:
    """The KEYS ranges a header lists: (first, last or None for open-ended)."""
    ranges: list[tuple[int, int | None]] = []
    for first, dots, last in LISTED_KEYS.findall(header):
        if not dots:
            ranges.append((int(first), int(first)))
        else:
            ranges.append((int(first), int(last) if last else None))
    return ranges


@pytest.mark.parametrize("path", LUA_FILES, ids=lambda path: path.name)
def test_no_lua_spells_a_key_name(path: Path) -> None:
    code = _code(path.read_text())
    assert [fragment for fragment in KEY_FRAGMENTS if fragment in code] == []


@pytest.mark.parametrize("path", LUA_FILES, ids=lambda path: path.name)
def test_no_lua_builds_a_key_by_concatenation(path: Path) -> None:
    assert BUILT_KEY.findall(_code(path.read_text())) == []


@pytest.mark.parametrize("path", LUA_FILES, ids=lambda path: path.name)
def test_every_keys_index_used_is_listed_in_the_header(path: Path) -> None:
    text = path.read_text()
    header = _header(text)
    body = text[text.index(header) + len(header) :]
    ranges = _listed(header)
    unlisted = [
        int(index)
        for index in USED_KEY.findall(body)
        if not any(first <= int(index) and (last is None or int(index) <= last)
                   for first, last in ranges)
    ]  # fmt: skip
    assert unlisted == []


@pytest.mark.parametrize("name", script_names())
def test_a_script_using_the_last_keys_lists_them(name: str) -> None:
    text = (LUA_DIR / f"{name}.lua").read_text()
    source = read_script(name).source
    header = _header(text)
    if "KEYS[#KEYS]" in source:
        assert "KEYS[last]" in header
    if "KEYS[#KEYS - 1]" in source:
        assert "KEYS[last-1]" in header


@pytest.mark.parametrize("name", script_names())
def test_a_script_taking_declared_keys_says_so(name: str) -> None:
    text = (LUA_DIR / f"{name}.lua").read_text()
    if '--- @include "declared"' in text:
        assert "declared job and model groups" in _header(text)


# -- the runtime audit ------------------------------------------------------------

MONITOR_LINE = re.compile(r"^\d+\.\d+ \[\d+ ([^\]]+)\] (.*)$")
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "a": "\a", "b": "\b", '"': '"', "\\": "\\"}


def _monitor_args(text: str) -> list[str]:
    """The arguments of a MONITOR line (each quoted, escaped as sdscatrepr does)."""
    args: list[str] = []
    i = 0
    while i < len(text):
        if text[i] != '"':
            i += 1
            continue
        i += 1
        chars: list[str] = []
        while text[i] != '"':
            if text[i] == "\\":
                code = text[i + 1]
                if code == "x":
                    chars.append(chr(int(text[i + 2 : i + 4], 16)))
                    i += 4
                    continue
                chars.append(_ESCAPES[code])
                i += 2
                continue
            chars.append(text[i])
            i += 1
        args.append("".join(chars))
        i += 1
    return args


@dataclass
class ScriptRun:
    sha: str
    keys: list[str]
    commands: list[list[str]] = field(default_factory=list)


class Monitor:
    """A MONITOR connection read on a thread: every EVALSHA with the commands it ran."""

    def __init__(self, port: int) -> None:
        self._port = port
        self._sock = socket.create_connection(("127.0.0.1", port))
        self._sock.sendall(b"MONITOR\r\n")
        self._file = self._sock.makefile("rb")
        assert self._file.readline() == b"+OK\r\n"
        self.lines: list[tuple[str, list[str]]] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for raw in self._file:
            line = raw.decode("latin-1").rstrip("\r\n").removeprefix("+")
            match = MONITOR_LINE.match(line)
            if match:
                self.lines.append((match.group(1), _monitor_args(match.group(2))))

    def stop(self) -> None:
        """Wait until every command sent so far was read, then disconnect."""
        marker = f"audit-end-{uuid.uuid4().hex}"
        SyncRedis(port=self._port).echo(marker)
        pause = threading.Event()
        for _ in range(500):  # a condition with a deadline (5 s), not a sleep
            if any(args[1:] == [marker] for _, args in self.lines):
                break
            pause.wait(0.01)
        self._sock.close()
        self._thread.join(timeout=5)

    def runs(self) -> list[ScriptRun]:
        """Each EVALSHA with the `[0 lua]` commands after it (a script is atomic,
        so nothing else runs between them; Redis 7.0 shows the EVALSHA first)."""
        runs: list[ScriptRun] = []
        current: ScriptRun | None = None
        for client, args in self.lines:
            if client == "lua":
                assert current is not None, f"script command without its EVALSHA: {args}"
                current.commands.append(args)
                continue
            current = None
            if args and args[0].upper() == "EVALSHA":
                numkeys = int(args[2])
                current = ScriptRun(args[1], args[3 : 3 + numkeys])
                runs.append(current)
        return runs


def command_keys(client: SyncRedis, command: list[str]) -> list[str]:
    if len(command) == 1:
        return []  # TIME: COMMAND GETKEYS needs an argument after the name
    args = [arg.encode("latin-1") for arg in command]
    try:
        keys = client.command_getkeys(*args)
    except ResponseError as error:
        if "no key arguments" in str(error):
            return []
        raise
    return [key if isinstance(key, str) else key.decode("latin-1") for key in keys]


def undeclared_keys(port: int, runs: list[ScriptRun]) -> list[tuple[str, str, str]]:
    """(script, command, key) for every key a script touched outside its KEYS."""
    names = {read_script(name).sha: name for name in script_names()}
    client = SyncRedis(port=port)
    found = []
    for run in runs:
        declared = set(run.keys)
        for command in run.commands:
            for key in command_keys(client, command):
                if key not in declared:
                    found.append((names.get(run.sha, run.sha), command[0], key))
    client.close()
    return found


def scripts_run(runs: list[ScriptRun]) -> set[str]:
    names = {read_script(name).sha: name for name in script_names()}
    return {names[run.sha] for run in runs if run.sha in names}


def single(model: str, key: str = "", **fields: object) -> SubmitRequest:
    return SubmitRequest(TENANT, JobSpec(model, b"input", **fields), idempotency_key=key)  # type: ignore[arg-type]


def group(model: str, size: int, max_parallel: int = 0, key: str = "") -> SubmitRequest:
    children = tuple(JobSpec(model, f"child {i}".encode()) for i in range(size))
    return SubmitRequest(TENANT, GroupSpec(children, max_parallel), idempotency_key=key)


async def _recovered(store: RedisStore, job_id: str, status: JobStatus) -> bool:
    await store.recover()
    return (await store.get(TENANT, job_id)).status is status


async def exercise(store: RedisStore, fast: RedisStore, cold: RedisStore) -> None:
    """Every script and path through RedisStore (`fast` has short leases;
    `cold` has seen none of the jobs it touches, so it declares no hints)."""
    # submit: single, keyed, a keyed resend, a group; submit_batch
    queued = (await store.submit(single("m-read"))).job
    keyed = (await store.submit(single("m-read", key="k1"))).job
    assert (await store.submit(single("m-read", key="k1"))).job.id == keyed.id
    held = (await store.submit(group("m-group", 3, max_parallel=1, key="g1"))).job
    batch = [single("m-read", key="k1"), single("m-batch", key="b1"), single("m-batch"),
             group("m-batch", 2)]  # fmt: skip
    await store.submit_batch(batch)
    # reads: get with position, a group, payload, children
    assert (await store.get(TENANT, queued.id)).queue_position is not None
    await store.get(TENANT, held.id)
    await store.payload(TENANT, queued.id)
    await store.list_children(TENANT, held.id)

    # a group child: claim, heartbeat, complete (releases the next held child),
    # fail (releases the last), the last one ends the group
    for status in (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.COMPLETED):
        [child] = await store.claim("w1", ["m-group"])
        await store.heartbeat(child.job.id, child.lease_id, 0.5, "half")
        await store.set_result(child.job.id, child.lease_id, status, b"out")
    assert (await store.get(TENANT, held.id)).terminal

    # retry, the retry's end of backoff, exhausted; a plain failure
    retried = (await store.submit(single("m-retry", max_attempts=2))).job
    [attempt] = await store.claim("w1", ["m-retry"])
    await store.set_result(attempt.job.id, attempt.lease_id, JobStatus.FAILED, retryable=True)
    await assert_eventually(lambda: _claimable(store, "m-retry"))
    [attempt] = await store.claim("w1", ["m-retry"])
    await store.set_result(attempt.job.id, attempt.lease_id, JobStatus.FAILED, retryable=True)
    assert (await store.get(TENANT, retried.id)).error_code == "ATTEMPTS_EXHAUSTED"
    await store.submit(single("m-fail"))
    [attempt] = await store.claim("w1", ["m-fail"])
    await store.set_result(attempt.job.id, attempt.lease_id, JobStatus.FAILED, error_code="E")

    # cancel: a queued job, a running one, a group with held and queued children
    await store.cancel(TENANT, queued.id)
    await store.submit(single("m-cancel"))
    [running] = await store.claim("w1", ["m-cancel"])
    await store.cancel(TENANT, running.job.id)
    cancelled = (await store.submit(group("m-cancel", 3, max_parallel=2))).job
    [running_child] = await store.claim("w1", ["m-cancel"])
    await store.cancel(TENANT, cancelled.id)
    await store.set_result(running_child.job.id, running_child.lease_id, JobStatus.COMPLETED)

    # release; report_and_claim
    await store.submit(single("m-release"))
    await store.submit(single("m-release"))
    leased = await store.claim("w1", ["m-release"])
    await store.release(leased)
    [first] = await store.claim("w1", ["m-release"])
    report = ResultReport(JobStatus.COMPLETED, b"done")
    step = await store.report_and_claim(
        "w1", ["m-release"], [(first.job.id, first.lease_id, report)], 2
    )
    assert len(step.claimed) == 1

    # recovery: an expired lease (a group child's too), a run timeout, a queue timeout
    await fast.submit(single("m-lease", max_attempts=1))
    await fast.submit(group("m-lease-group", 2, max_parallel=1))
    [expiring] = await fast.claim("w2", ["m-lease"])
    [expiring_child] = await fast.claim("w2", ["m-lease-group"])
    timed = (await store.submit(single("m-run", run_timeout=timedelta(milliseconds=100)))).job
    await store.claim("w3", ["m-run"])
    late = (await store.submit(single("m-late", queue_timeout=timedelta(milliseconds=100)))).job
    await assert_eventually(lambda: _recovered(fast, expiring.job.id, JobStatus.FAILED))
    await assert_eventually(lambda: _recovered(fast, expiring_child.job.id, JobStatus.QUEUED))
    await assert_eventually(lambda: _recovered(store, timed.id, JobStatus.QUEUED))
    await assert_eventually(lambda: _recovered(store, late.id, JobStatus.FAILED))
    assert await store.acquire_leadership("audit", timedelta(seconds=5))
    # the worker registry: a write, a read
    await store.record_workers([WorkerSighting("w1", timedelta(0), "gpu", ("m-read",))])
    assert await store.list_workers()
    await exercise_cold(store, cold)
    await exercise_partitioned(store.engine.connection.url)
    await exercise_index(store, cold)


async def exercise_index(store: RedisStore, cold: RedisStore) -> None:
    """RetryJob (a single job, a group), ListJobs' reads (every driver, an admin's
    walk) and the drain of expired index entries."""
    failed = (await store.submit(single("m-redo"))).job
    [attempt] = await store.claim("w1", ["m-redo"])
    await store.set_result(attempt.job.id, attempt.lease_id, JobStatus.FAILED)
    await cold.retry_job(TENANT, failed.id)
    redone = (await store.submit(group("m-redo", 2, max_parallel=1))).job
    await store.cancel(TENANT, redone.id)
    await cold.retry_job(None, redone.id, "admin:ops")
    for terms in ((), (("status", JobStatus.QUEUED),), (("model", "m-redo"),)):
        await store.list_jobs(None, JobFilter(tuple(FilterTerm(f, "=", v) for f, v in terms)),
                              None, 2)  # fmt: skip
    by_parent = JobFilter((FilterTerm("parent_id", "=", redone.id),))
    page = await store.list_jobs(TENANT, by_parent, None, 1)
    await store.list_jobs(TENANT, by_parent, page.next, 1)
    short = RedisStore(
        store.engine.connection.url,
        StoreSettings(result_ttl=timedelta(milliseconds=50)),
        partition=store.engine.owner.keys.partition + "-short",
    )
    await short.open()
    try:
        gone = (await short.submit(single("m-gone"))).job
        await short.cancel(TENANT, gone.id)

        async def drained() -> bool:
            await short.recover()
            page = await short.list_jobs(TENANT, JobFilter(), None, 1000)
            return gone.id not in [job.id for job in page.jobs] and not await _expiring(short)

        await assert_eventually(drained)
    finally:
        await short.close()


async def _expiring(store: RedisStore) -> int:
    client = AsyncRedis.from_url(store.engine.connection.url)
    try:
        return int(await client.llen(store.engine.owner.keys.index_expiring))
    finally:
        await client.aclose()


async def exercise_partitioned(url: str) -> None:
    """The partitioned store's own script (position_elsewhere) and its calls."""
    spread = RedisStore(url, StoreSettings(), f"spread-{uuid.uuid4().hex[:8]}", 3)
    await spread.open()
    try:
        jobs = [(await spread.submit(single("m-spread"))).job for _ in range(6)]
        assert (await spread.get(TENANT, jobs[-1].id)).queue_position == 5
        for claimed in await spread.claim("w1", ["m-spread"], max_jobs=6):
            await spread.set_result(claimed.job.id, claimed.lease_id, JobStatus.COMPLETED)
    finally:
        await spread.close()


async def exercise_cold(store: RedisStore, cold: RedisStore) -> None:
    """Paths through a store with no hints: each id met is asked for (KEYS_NEEDED)."""
    keyed_group = (await store.submit(group("m-cold", 3, max_parallel=1, key="g2"))).job
    await cold.get(TENANT, keyed_group.id)
    for status in (JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.COMPLETED):
        [child] = await store.claim("w1", ["m-cold"])
        await cold.set_result(child.job.id, child.lease_id, status)
    assert (await store.get(TENANT, keyed_group.id)).terminal
    await store.submit(single("m-cold", key="k3"))
    [keyed] = await store.claim("w1", ["m-cold"])
    await cold.set_result(keyed.job.id, keyed.lease_id, JobStatus.COMPLETED)
    assert (await cold.submit(single("m-read", key="k1"))).reused
    held = (await store.submit(group("m-cold", 3, max_parallel=1))).job
    await cold.list_children(TENANT, held.id)
    other = (await store.submit(group("m-cold", 2, max_parallel=1))).job
    [running] = await store.claim("w1", ["m-cold"])
    await cold.release([running])
    await fresh_cancel(store, held.id)
    await fresh_cancel(store, other.id)


async def fresh_cancel(store: RedisStore, job_id: str) -> None:
    """Cancel from a store that never saw the job."""
    fresh = RedisStore(
        store.engine.connection.url, store.settings, partition=store.engine.owner.keys.partition
    )
    await fresh.open()
    try:
        await fresh.cancel(TENANT, job_id)
    finally:
        await fresh.close()


async def _claimable(store: RedisStore, model: str) -> bool:
    await store.recover()
    depths = await store.queue_depths()
    return sum(n for (m, _), n in depths.items() if m == model) > 0


@pytest.fixture
def server(own_redis: RedisServer) -> RedisServer:
    return own_redis


@pytest.fixture
async def stores(
    server: RedisServer, partition: str
) -> AsyncIterator[tuple[RedisStore, RedisStore, RedisStore]]:
    settings = StoreSettings(retry_backoff_base=timedelta(milliseconds=20))
    fast_settings = StoreSettings(lease_timeout=timedelta(milliseconds=100))
    opened = (
        RedisStore(server.url, settings, partition=partition),
        RedisStore(server.url, fast_settings, partition=partition),
        RedisStore(server.url, settings, partition=partition),
    )
    for store in opened:
        await store.open()
    yield opened
    for store in opened:
        await store.close()


@pytest.fixture
async def audited(
    server: RedisServer, stores: tuple[RedisStore, RedisStore, RedisStore]
) -> list[ScriptRun]:
    monitor = Monitor(server.port)
    try:
        await exercise(*stores)
    finally:
        monitor.stop()
    return monitor.runs()


@pytest.mark.redis
async def test_the_audit_runs_every_script(audited: list[ScriptRun]) -> None:
    assert scripts_run(audited) == set(script_names())


@pytest.mark.redis
async def test_every_key_a_script_touches_is_in_its_keys(
    server: RedisServer, audited: list[ScriptRun]
) -> None:
    # by script and command, so a failure shows where (keys are per test)
    undeclared = Counter(f"{script} {command}" for script, command, _ in undeclared_keys(
        server.port, audited))  # fmt: skip
    assert dict(undeclared) == {}


# -- declaring in rounds ----------------------------------------------------------


@pytest.mark.redis
async def test_using_an_undeclared_job_is_an_error(server: RedisServer) -> None:
    source = lua_policy() + (LUA_DIR / "includes" / "declared.lua").read_text()
    client = SyncRedis(port=server.port)
    # nothing declared: the tail is the first group's KEYS index and three zero counts
    with pytest.raises(ResponseError, match="undeclared job j1"):
        client.eval(source + "\nreturn redis.call('GET', jk('j1'))", 0, 1, 0, 0, 0)
    client.close()


@pytest.mark.redis
async def test_a_claim_from_a_store_without_hints_claims_every_head_in_order(
    stores: tuple[RedisStore, RedisStore, RedisStore],
) -> None:
    gateway, _, worker = stores
    submitted = [(await gateway.submit(single("m-backlog"))).job.id for _ in range(6)]
    worker.engine._hints._ready.clear()  # the "r" messages it heard would be hints
    claimed = await worker.claim("w1", ["m-backlog"], max_jobs=6)
    assert [c.job.id for c in claimed] == submitted


@pytest.mark.redis
async def test_a_script_still_asking_for_keys_after_the_last_round_fails_naming_it(
    stores: tuple[RedisStore, RedisStore, RedisStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway, _, reader = stores
    parent = (await gateway.submit(group("m-rounds", 2))).job
    monkeypatch.setattr(redis_partition, "DECLARE_ROUNDS", 1)  # a group's get needs 2
    with pytest.raises(StoreError, match=r"children\.lua"):
        await reader.list_children(TENANT, parent.id)


@pytest.mark.redis
async def test_a_claim_that_loses_its_heads_to_other_claimers_every_round_claims_nothing(
    stores: tuple[RedisStore, RedisStore, RedisStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Under contention (and under fair share, where a new job may queue ahead of
    # the heads a round declared) every round can meet a head it did not declare.
    # Losing every race is finding nothing: no error (it was INTERNAL), the jobs
    # stay queued for the claimers that won them.
    gateway, _, worker = stores
    model = "m-raced"
    for _ in range(200):
        await gateway.submit(single(model))
    worker.engine._hints._ready.clear()
    part = worker.engine.owner
    one_round = part._claim_round

    async def raced(*args: Any, **kwargs: Any) -> tuple[list[ClaimedJob], list[str]]:
        claimed, needed = await one_round(*args, **kwargs)
        if needed:  # a rival takes every head this round asked to declare
            await gateway.claim("rival", [model], max_jobs=len(needed))
        return claimed, needed

    monkeypatch.setattr(part, "_claim_round", raced)
    assert await worker.claim("w1", [model], max_jobs=1) == []
    monkeypatch.undo()
    assert len(await worker.claim("w1", [model], max_jobs=1)) == 1


# -- claim hints from notifications -----------------------------------------------


async def _no_client(channels: Sequence[str], stale: Sequence[str]) -> list[AsyncRedis]:
    raise AssertionError("the notifier is never started here")


def _notifier_heard(
    message: bytes, kind: str = "message"
) -> tuple[bool, list[tuple[str, str, str]]]:
    """(did a listener of "r m" wake, the hints handed on) for one message."""
    notifier = Notifier(_no_client)
    notifier.add_channel("channel", READY)
    heard: list[tuple[str, str, str]] = []
    notifier.on_ready = lambda channel, model, job_id: heard.append((channel, model, job_id))
    with notifier.listen(["r m"]) as listener:
        notifier._dispatch({"type": kind, "channel": b"channel", "data": message})
        return listener.event.is_set(), heard


def test_a_ready_message_wakes_its_model_and_hands_on_the_id() -> None:
    assert _notifier_heard(b"r m 01JOB") == (True, [("channel", "m", "01JOB")])


def test_a_sharded_ready_message_wakes_and_hints_as_a_plain_one() -> None:
    # Redis Cluster: the scripts SPUBLISH, subscribers read "smessage"
    assert _notifier_heard(b"r m 01JOB", "smessage") == (True, [("channel", "m", "01JOB")])


def test_a_ready_message_without_an_id_still_wakes_its_model() -> None:
    # an older server's scripts publish "r <model>" during a rolling upgrade
    assert _notifier_heard(b"r m") == (True, [])
