"""KEDA's external scaler (`externalscaler.ExternalScaler`), served on the JobService port.

KEDA's `external` trigger polls IsActive and GetMetrics; its
`external-push` trigger holds StreamIsActive open and is told at once when
a model's demand turns between zero and non-zero (gateway_server/demand.py),
so the first Submit to an idle model wakes its workers without waiting for
a poll. docs/keda.md shows the ScaledObject.

The metric is `Store.demand(model, pool)`: QUEUED + PROCESSING jobs that
workers of the pool could take or are running, so a scale-down never
stops a running job's worker for want of a backlog. Its name is
`jobgate-<model>-<pool>` (`any` without a pool); the HPA divides it by
targetJobsPerWorker.

No credentials are asked for, even with --auth-file: the service reveals
counts only, as /metrics does (DESIGN "Autoscaling with KEDA"). Calls still
pass the one interceptor (drain, metrics, error mapping).

The trigger's metadata (KEDA sends all of it in scalerMetadata): `model`
(required), `pool` (optional; empty means any), `targetJobsPerWorker`
(optional, an integer 1..MAX_TARGET, default 1); other keys are ignored.
A bad value is INVALID_ARGUMENT naming `scalerMetadata.<key>`
(`scaledObjectRef.scalerMetadata.<key>` in GetMetrics).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc.aio

from gateway_server.demand import DemandWatches, Trigger
from jobgate.keda import externalscaler_pb2 as pb
from jobgate.keda import externalscaler_pb2_grpc
from serving.shared import Serving
from serving.violations import Violations, quote

Context = grpc.aio.ServicerContext[Any, Any]
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["ExternalScaler"].full_name

#: The largest targetJobsPerWorker (a 32-bit count: the HPA's target is an int64).
MAX_TARGET = 2**31 - 1
_DIGITS = re.compile(r"[0-9]{1,10}")


@dataclass(frozen=True)
class ScalerRequest:
    """A ScaledObjectRef's metadata, checked."""

    trigger: Trigger
    target: int

    @property
    def metric_name(self) -> str:
        return f"jobgate-{self.trigger.model}-{self.trigger.pool or 'any'}"


def scaler_request(ref: pb.ScaledObjectRef, prefix: str = "") -> ScalerRequest:
    """The trigger and target of `ref`, or INVALID_ARGUMENT naming each bad key."""
    metadata = ref.scalerMetadata
    path = f"{prefix}scalerMetadata."
    v = Violations()
    model = metadata.get("model", "")
    v.model(f"{path}model", model)
    pool = metadata.get("pool", "")
    v.pool(f"{path}pool", pool)
    raw = metadata.get("targetJobsPerWorker", "").strip()
    target = 1
    if raw:
        if _DIGITS.fullmatch(raw) and 1 <= int(raw) <= MAX_TARGET:
            target = int(raw)
        else:
            v.add(
                f"{path}targetJobsPerWorker",
                f"must be an integer 1..{MAX_TARGET} (got {quote(raw)})",
            )
    v.raise_if_any()
    return ScalerRequest(Trigger(model, pool or None), target)


class ExternalScaler(externalscaler_pb2_grpc.ExternalScalerServicer):
    """KEDA's four calls over the store's demand (module docstring)."""

    def __init__(self, serving: Serving, watches: DemandWatches | None = None) -> None:
        self._serving = serving
        self._store = serving.store
        self.watches = watches if watches is not None else DemandWatches(serving.store)

    async def _demand(self, request: ScalerRequest) -> int:
        return await self._store.demand(request.trigger.model, request.trigger.pool)

    async def IsActive(self, request: pb.ScaledObjectRef, context: Context) -> pb.IsActiveResponse:
        return pb.IsActiveResponse(result=await self._demand(scaler_request(request)) > 0)

    async def StreamIsActive(
        self, request: pb.ScaledObjectRef, context: Context
    ) -> AsyncIterator[pb.IsActiveResponse]:
        trigger = scaler_request(request).trigger
        lifecycle = self._serving.lifecycle
        async with self.watches.watching(trigger) as watch:
            states = watch.states()
            async with contextlib.aclosing(states):  # type: ignore[type-var]
                while True:
                    finished, active = await lifecycle.unless_draining(anext(states))
                    if not finished or active is None:
                        return  # draining: KEDA opens the stream again elsewhere
                    yield pb.IsActiveResponse(result=active)

    async def GetMetricSpec(
        self, request: pb.ScaledObjectRef, context: Context
    ) -> pb.GetMetricSpecResponse:
        checked = scaler_request(request)
        spec = pb.MetricSpec(
            metricName=checked.metric_name,
            targetSize=checked.target,
            targetSizeFloat=float(checked.target),
        )
        return pb.GetMetricSpecResponse(metricSpecs=[spec])

    async def GetMetrics(
        self, request: pb.GetMetricsRequest, context: Context
    ) -> pb.GetMetricsResponse:
        checked = scaler_request(request.scaledObjectRef, "scaledObjectRef.")
        demand = await self._demand(checked)
        value = pb.MetricValue(
            # KEDA asks by the name GetMetricSpec gave (its own prefix removed)
            metricName=request.metricName or checked.metric_name,
            metricValue=demand,
            metricValueFloat=float(demand),
        )
        return pb.GetMetricsResponse(metricValues=[value])
