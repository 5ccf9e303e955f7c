"""Submit's checks and creations in LocalEngine's state (LocalEngine.submit, submit_batch).

Functions of the State (which a reload replaces), so they hold no state of
their own: the checks change nothing (all or nothing for a batch), the
creations make the records, take the keys and count the jobs live.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ulid import ULID

from store import fields, policy
from store.errors import IdempotencyKeyReused, InvalidRequest, QueueFull, QuotaExceeded, StoreError
from store.memory.record import Record
from store.memory.state import State
from store.model import GroupSpec, JobKind, JobSpec, JobStatus, SubmitRequest


def plan_batch(
    state: State, requests: Sequence[SubmitRequest], now: float
) -> list[tuple[str, Record | int | None]]:
    """Submit's checks for every item, in order, changing nothing.

    Each item gets its fingerprint and where its answer comes from: an
    existing job, the index of an earlier item that creates it, or None
    (create it). Admission counts the jobs of the earlier items. A
    refusal is raised as its item's error.
    """
    taken: dict[tuple[str, str], tuple[str, int]] = {}  # key -> (fingerprint, item)
    added: dict[str, int] = {}
    plan: list[tuple[str, Record | int | None]] = []
    for index, request in enumerate(requests):
        try:
            plan.append(plan_item(state, request, index, now, taken, added))
        except StoreError as error:
            raise error.for_item(index) from None
    return plan


def plan_item(
    state: State,
    request: SubmitRequest,
    index: int,
    now: float,
    taken: dict[tuple[str, str], tuple[str, int]],
    added: dict[str, int],
) -> tuple[str, Record | int | None]:
    key = request.idempotency_key
    fingerprint = request.fingerprint() if key else ""
    if key:
        earlier = taken.get((request.tenant, key))
        if earlier is not None:
            if earlier[0] != fingerprint:
                raise IdempotencyKeyReused(
                    f"idempotency key {key!r} was used for a different request "
                    f"(requests[{earlier[1]}])"
                )
            return fingerprint, earlier[1]
        existing = state.keyed(request.tenant, key, now)
        if existing is not None:
            if existing.fingerprint != fingerprint:
                raise IdempotencyKeyReused(
                    f"idempotency key {key!r} was used for a different request",
                    job_id=existing.id,
                )
            return fingerprint, existing
    count = admit(state, request, added.get(request.tenant, 0), sum(added.values()))
    added[request.tenant] = added.get(request.tenant, 0) + count
    if key:
        taken[(request.tenant, key)] = (fingerprint, index)
    return fingerprint, None


def create(state: State, request: SubmitRequest, fingerprint: str, now: float) -> Record:
    """Create an admitted request's job or group and take its idempotency key."""
    if isinstance(request.work, GroupSpec):
        record = create_group(state, request, request.work, fingerprint, now)
    else:
        record = create_single(state, request, request.work, fingerprint, now)
    if request.idempotency_key:
        state.keys[(request.tenant, request.idempotency_key)] = record.id
    return record


def admit(state: State, request: SubmitRequest, tenant_added: int = 0, total_added: int = 0) -> int:
    """Refuse a request over a cap, counting jobs a batch adds before it; its job count."""
    if isinstance(request.work, GroupSpec):
        count = len(request.work.children)
        if count == 0:
            raise InvalidRequest("group.children", "a group needs at least one child")
        if count > state.settings.max_group_children:
            raise InvalidRequest(
                "group.children",
                f"{count} children is over the cap of {state.settings.max_group_children}",
            )
    else:
        count = 1
    live = state.live_by_tenant.get(request.tenant, 0) + tenant_added
    if live + count > state.settings.max_live_per_tenant:
        raise QuotaExceeded(
            f"tenant {request.tenant!r} has too many live jobs", tenant=request.tenant
        )
    if state.live_total + total_added + count > state.settings.max_live_total:
        raise QueueFull("too many live jobs")
    return count


def new_record(
    state: State,
    request: SubmitRequest,
    spec: JobSpec,
    now: float,
    parent: Record | None = None,
    index: int = 0,
) -> Record:
    """A single job (QUEUED) or a group's child (HELD), counted as live."""
    key = request.idempotency_key
    if parent is not None:
        key = policy.child_key(key, index)
    effective = policy.limits(spec, state.settings)
    record = Record(
        id=str(ULID()),
        tenant=request.tenant,
        kind=JobKind.SINGLE if parent is None else JobKind.CHILD,
        status=JobStatus.QUEUED if parent is None else JobStatus.HELD,
        priority=request.priority,
        model=spec.model,
        create_time=now,
        update_time=now,
        payload=spec.payload,
        max_attempts=effective.max_attempts,
        queue_timeout=effective.queue_timeout.total_seconds(),
        run_timeout=effective.run_timeout.total_seconds(),
        idempotency_key=key,
        parent_id=parent.id if parent else "",
        child_index=index,
        weight=weight(state, request),
    )
    for name, value in fields.copied(spec).items():
        setattr(record, name, dict(value) if isinstance(value, Mapping) else value)
    state.jobs[record.id] = record
    state.live_by_tenant[record.tenant] = state.live_by_tenant.get(record.tenant, 0) + 1
    state.live_total += 1
    state.emit(record, None, now)
    return record


def create_single(
    state: State, request: SubmitRequest, spec: JobSpec, fingerprint: str, now: float
) -> Record:
    record = new_record(state, request, spec, now)
    record.fingerprint = fingerprint
    state.enqueue(record, now)
    return record


def weight(state: State, request: SubmitRequest) -> int:
    """The weight a job's queue score is made with: 0 when fair share is off."""
    return request.weight if state.settings.fair_share else 0


def create_group(
    state: State, request: SubmitRequest, group: GroupSpec, fingerprint: str, now: float
) -> Record:
    key = request.idempotency_key
    parent = Record(
        id=str(ULID()),
        tenant=request.tenant,
        kind=JobKind.GROUP,
        status=JobStatus.QUEUED,
        priority=request.priority,
        model=group.children[0].model,
        create_time=now,
        update_time=now,
        fingerprint=fingerprint,
        idempotency_key=key,
        max_parallel=max(0, group.max_parallel),
        weight=weight(state, request),
    )
    pools = {child.pool for child in group.children}
    if len(pools) == 1:  # a group of one pool is bound to it (as in Redis)
        parent.pool = pools.pop()
    state.jobs[parent.id] = parent
    state.emit(parent, None, now)
    for index, spec in enumerate(group.children):
        child = new_record(state, request, spec, now, parent, index)
        parent.children.append(child.id)
    state.release_held(parent, now)
    return parent
