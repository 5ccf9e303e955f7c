"""RetryJob's rules, shared by both engines (store/memory/redrive.py, store/lua/retry_job.lua).

Which statuses each kind may be retried from, and what a refusal says.
retry_job.lua spells the same table (tests/store/test_contract_retry.py
holds both engines to it).
"""

from __future__ import annotations

from collections.abc import Mapping

from store.model import JobKind, JobStatus

#: The statuses RetryJob takes, per kind (a child alone: none).
RETRYABLE: Mapping[JobKind, frozenset[JobStatus]] = {
    JobKind.SINGLE: frozenset({JobStatus.FAILED, JobStatus.CANCELLED}),
    JobKind.GROUP: frozenset({JobStatus.FAILED, JobStatus.PARTIAL, JobStatus.CANCELLED}),
    JobKind.CHILD: frozenset(),
}

#: Why a retry was refused, by the word retry_job.lua answers with.
WHY: Mapping[str, str] = {
    "alone": "a group child is retried with its group",
    "status": "only FAILED or CANCELLED jobs and FAILED, PARTIAL or CANCELLED groups are retried",
    "done": "every child of the group completed",
}
