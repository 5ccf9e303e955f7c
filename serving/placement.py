"""Placement rules: the pool a submitted job is bound to, the pool a worker claims for.

A job is bound at submit, once: the pool it names if its tenant may use it,
else POOL_NOT_ALLOWED; naming none, its tenant's first pool (a restricted
tenant) or "" (any pool). A group or a batch is bound as a whole: one child
or item naming a pool its tenant may not use refuses the call, naming that
field, before anything reaches the store. The store then keeps every job to
its bound pool on every claim path (DESIGN "Placement").

A worker claims for one pool: the one its request names, which must be its
credential's, or its credential's when it names none. Open mode has no
credentials, so there the request's pool is taken as given (empty:
`default`).

The rules need only the caller and the names, so they live here, not in a
servicer: the gateway binds Submit and BatchSubmit, the worker server claims,
and RetryJob checks a job's bound pool against its tenant's current pools.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from google.rpc import code_pb2

from jobgate.v1.errors import Reason
from serving.auth import DEFAULT_POOL, AuthError, Caller
from store.model import GroupSpec, JobSpec, SubmitRequest

Pools = tuple[str, ...] | None


class PoolNotAllowed(AuthError):
    """PERMISSION_DENIED with ErrorInfo POOL_NOT_ALLOWED naming the pool and the field."""

    def __init__(self, pool: str, field: str, why: str, **metadata: str) -> None:
        # Pools are validated before they are bound: short, no quoting limit needed.
        shown = repr(pool) if pool else "any pool"
        super().__init__(
            code_pb2.PERMISSION_DENIED,
            f"{field}: {shown} {why}",
            Reason.POOL_NOT_ALLOWED,
            {"pool": pool, "field": field, **metadata},
        )
        self.pool = pool
        self.field = field


def job_pool(pools: Pools, requested: str, field: str) -> str:
    """The pool a job asking for `requested` is bound to ("" = any pool).

    `pools` is the tenant's allowed list (None: unrestricted); `field` names
    the request field in a refusal (`job.pool`, `group.children[3].pool`).
    """
    if not requested:
        return pools[0] if pools else ""
    if pools is None or requested in pools:
        return requested
    raise PoolNotAllowed(requested, field, f"is not one of the tenant's pools ({_listed(pools)})")


def bind_submit(pools: Pools, submit: SubmitRequest, prefix: str = "") -> SubmitRequest:
    """`submit` with every job's pool bound (JobSpec.pool held the requested one)."""
    work = submit.work
    if isinstance(work, GroupSpec):
        children = tuple(
            _bound(pools, child, f"{prefix}group.children[{index}].pool")
            for index, child in enumerate(work.children)
        )
        return replace(submit, work=replace(work, children=children))
    return replace(submit, work=_bound(pools, work, f"{prefix}job.pool"))


def bind_batch(pools: Pools, submits: Sequence[SubmitRequest]) -> list[SubmitRequest]:
    """Each item bound as Submit binds it, its fields named `requests[i].…`; all or none."""
    return [
        bind_submit(pools, submit, f"requests[{index}].") for index, submit in enumerate(submits)
    ]


def _bound(pools: Pools, spec: JobSpec, field: str) -> JobSpec:
    pool = job_pool(pools, spec.pool, field)
    return spec if pool == spec.pool else replace(spec, pool=pool)


def check_retry(pools: Pools, job_id: str, bound: str) -> None:
    """RetryJob: a job goes back only to a pool its tenant may still use.

    A job bound to any pool ("") of a tenant since restricted is refused too:
    retried as it is, it could run outside the tenant's pools.
    """
    if pools is None or bound in pools:
        return
    raise PoolNotAllowed(
        bound,
        "job_id",
        f"is not one of the job's tenant's pools now ({_listed(pools)})",
        job_id=job_id,
    )


def claim_pool(caller: Caller, requested: str, field: str = "pool") -> str:
    """The pool a worker's claim serves: its credential's (open mode: as requested)."""
    if caller.pool is None:
        return requested or DEFAULT_POOL
    if not requested or requested == caller.pool:
        return caller.pool
    raise PoolNotAllowed(requested, field, f"is not this worker token's pool ({caller.pool!r})")


def _listed(pools: Sequence[str]) -> str:
    return ", ".join(pools)
