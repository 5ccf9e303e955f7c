"""What both stores decide alike, written once.

LocalStore calls these functions; RedisStore's scripts get the same
constants through the `policy` include that `lua_policy()` generates here
(as keys.py generates the key helpers), so a status name, an error code or
a message the store writes is spelled in this module (or model.py) only.
The one formula Lua keeps its own copy of is the retry backoff
(includes/common.lua `backoff_ms`), checked against `retry_delay` by
tests/store/test_policy.py.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from jobgate.v1.errors import HANDLER_ERROR
from jobgate.v1.limits import MAX_JOBS_PER_CLAIM
from store import fields
from store.codes import LuaCode
from store.model import (
    ERROR_ATTEMPTS_EXHAUSTED,
    ERROR_CANCELLED,
    ERROR_LEASE_EXPIRED,
    ERROR_QUEUE_TIMEOUT,
    ERROR_RUN_TIMEOUT,
    TERMINAL_STATUSES,
    Job,
    JobKind,
    JobSpec,
    JobStatus,
    StoreSettings,
)

# error_message the store writes; "{name}" fields are filled in by both stores.
GROUP_MESSAGE = "{failed} of {total} children did not complete"
GROUP_CANCELLED_MESSAGE = "its group was cancelled"
QUEUE_TIMEOUT_MESSAGE = "queued longer than its queue_timeout"
LEASE_EXPIRED_MESSAGE = "lease of attempt {attempts} expired"
RUN_TIMEOUT_MESSAGE = "attempt {attempts} ran past its run_timeout"
EXHAUSTED_MESSAGE = "{error_code}: {error_message}"

_ERROR_CODES = {
    "ATTEMPTS_EXHAUSTED": ERROR_ATTEMPTS_EXHAUSTED,
    "CANCELLED": ERROR_CANCELLED,
    "HANDLER_ERROR": HANDLER_ERROR,
    "LEASE_EXPIRED": ERROR_LEASE_EXPIRED,
    "QUEUE_TIMEOUT": ERROR_QUEUE_TIMEOUT,
    "RUN_TIMEOUT": ERROR_RUN_TIMEOUT,
}
_FIELD = re.compile(r"\{([a-z_]+)\}")


@dataclass(frozen=True)
class Limits:
    """A job's effective limits: the spec's, or the store's defaults where it left zero."""

    max_attempts: int
    queue_timeout: timedelta
    run_timeout: timedelta


def limits(spec: JobSpec, settings: StoreSettings) -> Limits:
    return Limits(
        max_attempts=max(1, spec.max_attempts or settings.max_attempts),
        queue_timeout=spec.queue_timeout or settings.queue_timeout,
        run_timeout=spec.run_timeout or settings.run_timeout,
    )


def child_key(parent_key: str, index: int) -> str:
    """A group child's idempotency key: "<parent key>#<index>" ("" without a parent key)."""
    return f"{parent_key}#{index}" if parent_key else ""


def group_outcome(total: int, completed: int) -> tuple[JobStatus, str]:
    """A finished group's status and error_message, from how many children completed."""
    if completed == total:
        return JobStatus.COMPLETED, ""
    status = JobStatus.FAILED if completed == 0 else JobStatus.PARTIAL
    return status, GROUP_MESSAGE.format(failed=total - completed, total=total)


class Verdict(StrEnum):
    """What a guard decides about a worker's call on a lease."""

    APPLY = "apply"
    REPEAT = "repeat"  # the same lease and outcome again: answer the stored job
    LEASE_LOST = "lease_lost"
    JOB_CANCELLED = "job_cancelled"  # set_result after a cancel: refused
    CANCEL_REQUESTED = "cancel_requested"  # heartbeat after a cancel: told to stop


def result_verdict(
    status: JobStatus, lease_matches: bool, cancel_requested: bool, same_outcome: bool
) -> Verdict:
    """SetResult's guard (an unknown job is JOB_NOT_FOUND before it)."""
    if not lease_matches:
        return Verdict.LEASE_LOST
    if status is JobStatus.CANCELLED and cancel_requested:
        return Verdict.JOB_CANCELLED
    if status is not JobStatus.PROCESSING:
        return Verdict.REPEAT if same_outcome else Verdict.LEASE_LOST
    return Verdict.APPLY


def heartbeat_verdict(status: JobStatus, lease_matches: bool, cancel_requested: bool) -> Verdict:
    """Heartbeat's guard (an unknown job is JOB_NOT_FOUND before it)."""
    if not lease_matches:
        return Verdict.LEASE_LOST
    if status is JobStatus.CANCELLED and cancel_requested:
        return Verdict.CANCEL_REQUESTED
    if status is not JobStatus.PROCESSING:
        return Verdict.LEASE_LOST
    return Verdict.APPLY


def _flags(*values: bool) -> str:
    return "".join("1" if value else "0" for value in values)


def _verdict_table(name: str, guard: Callable[..., Verdict], flags: int) -> str:
    """A guard as a Lua table: "<status>|<flags>" -> verdict, every case spelled out."""
    rows = {
        f"{status.value}|{_flags(*combo)}": guard(status, *combo).value
        for status in JobStatus
        for combo in itertools.product((False, True), repeat=flags)
    }
    return _lua_table(name, {f"[{_lua_string(k)}]": _lua_string(v) for k, v in rows.items()})


def exhausted_message(error_code: str, error_message: str) -> str:
    """The error_message of an ATTEMPTS_EXHAUSTED job: the last attempt's failure."""
    if not error_message:
        return error_code
    return EXHAUSTED_MESSAGE.format(error_code=error_code, error_message=error_message)


def retry_delay(attempts: int, settings: StoreSettings) -> timedelta:
    """How long a retryable failure of attempt `attempts` waits before it is claimable."""
    delay = settings.retry_backoff_base * (1 << (max(attempts, 1) - 1))
    return min(delay, settings.retry_backoff_max)


def claim_limit(max_jobs: int) -> int:
    """How many jobs one claim takes: at least one, at most the contract's cap
    (a caller asking for more gets that many)."""
    return min(max(max_jobs, 1), MAX_JOBS_PER_CLAIM)


def claim_models(models: Sequence[str]) -> list[str]:
    """The models a claim serves, first mention first (an empty list claims nothing)."""
    return list(dict.fromkeys(models))


# -- placement and fair share ------------------------------------------------------

#: Separates a model from a pool in a queue class ("model@pool"); in neither name.
CLASS_SEPARATOR = "@"


def queue_class(model: str, pool: str) -> str:
    """The ready queues a job waits in: its model's any-pool class ("m"), or "m@pool"."""
    return f"{model}{CLASS_SEPARATOR}{pool}" if pool else model


def class_parts(job_class: str) -> tuple[str, str]:
    """(model, pool) of a queue class; pool "" for the any-pool one."""
    model, _, pool = job_class.partition(CLASS_SEPARATOR)
    return model, pool


def claim_classes(models: Sequence[str], pool: str) -> list[str]:
    """What a worker of `pool` claims from: per model, its pool's class and the any-pool one.

    Placement by construction: every claim path takes its jobs from these
    classes only, so a job bound to another pool is never in reach.
    """
    classes: list[str] = []
    for model in models:
        if pool:
            classes.append(queue_class(model, pool))
        classes.append(model)
    return classes


#: A weight-1 tenant's step in pass: a job's queue score under fair share is
#: max(its tenant's last pass, the pass last handed out) + PASS_UNIT / weight
#: (rounded: an integer score is exact in Redis and Lua up to 2^53).
PASS_UNIT = 100_000
MAX_WEIGHT = 1000


def pass_step(weight: int) -> int:
    """PASS_UNIT / weight rounded half up (as Lua's math.floor(x + 0.5))."""
    return math.floor(PASS_UNIT / min(max(weight, 1), MAX_WEIGHT) + 0.5)


def next_pass(tenant_last: float, floor: float, weight: int) -> float:
    """A new job's queue score under fair share (docs/fair-share.md)."""
    return max(tenant_last, floor) + pass_step(weight)


#: A watch woken only because its queue moved (a position changed) re-reads
#: at most this often, so a burst of claims or cancels on a busy queue costs
#: each watcher one re-read per interval, not one per move. 1 s: with 2,000
#: streams on one moving queue, re-reads every 0.5 s took a whole gateway core
#: (py-spy: 33% of its samples in watch re-reads) and Cancels waited past 10 s.
POSITION_SETTLE = 1.0

#: Re-reads per second that the watchers of one queue may cost a RedisStore
#: after queue moves, all together: a crowd of watchers on one queue then
#: waits longer between position updates instead of taking the process's CPU
#: from its RPCs (2,000 streams -> one update each 4 s).
POSITION_READS_PER_SECOND = 500.0


def position_settle(watchers: int) -> float:
    """How long a watcher woken by a queue move waits before it re-reads."""
    return max(POSITION_SETTLE, watchers / POSITION_READS_PER_SECOND)


def watch_view(job: Job) -> tuple[object, ...]:
    """What makes a new watch snapshot worth sending."""
    children = tuple((child.id, child.status) for child in job.children)
    return (job.status, job.progress, job.stage, job.queue_position, children)


# -- the Lua include ---------------------------------------------------------


def _lua_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _lua_table(name: str, entries: dict[str, str]) -> str:
    body = ", ".join(f"{key} = {value}" for key, value in entries.items())
    return f"local {name} = {{{body}}}"


def _lua_template(name: str, template: str) -> str:
    """A Lua function that fills `template`'s "{field}"s from its arguments, in order."""
    fields = _FIELD.findall(template)
    parts = [
        _lua_string(piece) if index % 2 == 0 else piece
        for index, piece in enumerate(_FIELD.split(template))
        if piece or index % 2
    ]
    return f"local function {name}({', '.join(fields)}) return {' .. '.join(parts)} end"


def _lua_stamps() -> list[str]:
    """stamp_<transition>(key, now) for every transition the field table stamps."""
    transitions = sorted({name for f in fields.JOB_FIELDS for name in f.stamps})
    functions = []
    for transition in transitions:
        calls = [
            f"redis.call('{'HSET' if how is fields.Stamp.ALWAYS else 'HSETNX'}', key, "
            f"{_lua_string(name)}, now)"
            for name, how in fields.stamped(transition)
        ]
        functions.append(f"local function stamp_{transition}(key, now) {' '.join(calls)} end")
    # the same as data, for a script that writes the stamps in its own HSET
    for name, how in (("STAMP_ALWAYS", fields.Stamp.ALWAYS), ("STAMP_ONCE", fields.Stamp.ONCE)):
        rows = {
            transition: "{"
            + ", ".join(_lua_string(f) for f, each in fields.stamped(transition) if each is how)
            + "}"
            for transition in transitions
        }
        functions.append(_lua_table(name, rows))
    return functions


def stamp(record: object, transition: str, now: float) -> None:
    """The field table's stamps of `transition` on a LocalEngine record (as Lua's stamp_*)."""
    for name, how in fields.stamped(transition):
        if how is fields.Stamp.ALWAYS or getattr(record, name) is None:
            setattr(record, name, now)


def lua_policy() -> str:
    """The `policy` include: status, kind, error-code and return-code names and messages."""
    statuses = {status.name: _lua_string(status.value) for status in JobStatus}
    terminal = {status.value: "true" for status in JobStatus if status in TERMINAL_STATUSES}
    return "\n".join(
        [
            "",
            "-- generated by store/policy.py lua_policy(): edit the Python constants",
            _lua_table("ST", statuses),
            _lua_table("KIND", {kind.name: _lua_string(kind.value) for kind in JobKind}),
            _lua_table("ERR", {k: _lua_string(v) for k, v in _ERROR_CODES.items()}),
            _lua_table("RC", {code.name: str(code.value) for code in LuaCode}),
            _lua_table("TERMINAL", terminal),
            _lua_table("VERDICT", {v.name: _lua_string(v.value) for v in Verdict}),
            _verdict_table("RESULT_VERDICT", result_verdict, 3),
            _verdict_table("HEARTBEAT_VERDICT", heartbeat_verdict, 2),
            "local function flags(...) local s = '' for _, v in ipairs({...}) do"
            " s = s .. (v and '1' or '0') end return s end",
            f"local MSG_GROUP_CANCELLED = {_lua_string(GROUP_CANCELLED_MESSAGE)}",
            f"local MSG_QUEUE_TIMEOUT = {_lua_string(QUEUE_TIMEOUT_MESSAGE)}",
            _lua_template("group_message", GROUP_MESSAGE),
            _lua_template("lease_expired_message", LEASE_EXPIRED_MESSAGE),
            _lua_template("run_timeout_message", RUN_TIMEOUT_MESSAGE),
            _lua_template("exhausted_message_of", EXHAUSTED_MESSAGE),
            *_lua_stamps(),
            # placement and fair share: queue_class and next_pass above, in Lua
            f"local CLASS_SEPARATOR = {_lua_string(CLASS_SEPARATOR)}",
            "local function queue_class(model, pool)"
            " if pool and pool ~= '' then return model .. CLASS_SEPARATOR .. pool end"
            " return model end",
            f"local PASS_UNIT, MAX_WEIGHT = {PASS_UNIT}, {MAX_WEIGHT}",
            "local function pass_step(weight)"
            " return math.floor(PASS_UNIT / math.min(math.max(weight, 1), MAX_WEIGHT) + 0.5) end",
            "local function next_pass(last, floor, weight)"
            " return math.max(last, floor) + pass_step(weight) end",
            "",
        ]
    )
