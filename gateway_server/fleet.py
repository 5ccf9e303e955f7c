"""ListWorkers and ListQueues answers: the store's fleet reads as protos."""

from __future__ import annotations

from jobgate.v1 import job_pb2, job_service_pb2
from serving.convert import PRIORITY_TO_PROTO, timestamp
from store.model import QueueStats, WorkerInfo


def worker_to_proto(worker: WorkerInfo) -> job_pb2.Worker:
    return job_pb2.Worker(
        worker_id=worker.worker_id,
        pool=worker.pool,
        models=list(worker.models),
        last_seen_time=timestamp(worker.last_seen_time),
        job_ids=list(worker.job_ids),
    )


def queue_to_proto(stats: QueueStats) -> job_pb2.QueueStats:
    message = job_pb2.QueueStats(
        model=stats.model,
        priority=PRIORITY_TO_PROTO[stats.priority],
        pool=stats.pool,
        queued=stats.queued,
        processing=stats.processing,
    )
    if stats.oldest_queued_time is not None:
        message.oldest_queued_time.CopyFrom(timestamp(stats.oldest_queued_time))
    return message


def list_workers_response(workers: list[WorkerInfo]) -> job_service_pb2.ListWorkersResponse:
    return job_service_pb2.ListWorkersResponse(workers=[worker_to_proto(w) for w in workers])


def list_queues_response(queues: list[QueueStats]) -> job_service_pb2.ListQueuesResponse:
    return job_service_pb2.ListQueuesResponse(queues=[queue_to_proto(q) for q in queues])
