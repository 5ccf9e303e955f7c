"""Log fields of the servers' job lines; the formats are jobgate._logs'.

Every line about a job carries `job_id` and `tenant` (see `job_fields`).
"""

from __future__ import annotations

from jobgate._logs import configure
from store.model import Job, JobEvent

__all__ = ["configure", "event_fields", "job_fields"]


def job_fields(job: Job, **more: object) -> dict[str, object]:
    fields: dict[str, object] = {
        "job_id": job.id,
        "tenant": job.tenant,
        "model": job.model,
        "status": job.status.value,
    }
    fields.update(more)
    return fields


def event_fields(event: JobEvent) -> dict[str, object]:
    return {
        "job_id": event.job_id,
        "tenant": event.tenant,
        "parent_job_id": event.parent_job_id,
        "model": event.model,
        "from": event.from_status.value if event.from_status else "",
        "to": event.to_status.value,
        "attempts": event.attempts,
        "worker_id": event.worker_id,
        "error_code": event.error_code,
        "actor": event.actor,
    }
