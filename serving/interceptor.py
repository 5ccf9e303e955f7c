"""The one interceptor every jobgate RPC passes through.

For each jobgate.v1 method, and KEDA's external scaler served beside
JobService, it wraps the handler so that:
- a request that does not even decode is INVALID_ARGUMENT (not INTERNAL);
- while draining, a new call is UNAVAILABLE with ErrorInfo SHUTTING_DOWN;
- in-flight calls are counted, so shutdown can wait for them;
- any exception becomes a status in one place (`errors.to_status`);
- grpc_server_started/handled/handling_seconds are recorded.
Health and reflection pass through untouched: they must keep answering
(NOT_SERVING) while the server drains.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

import grpc
import grpc.aio
from google.rpc import status_pb2
from grpc_status import rpc_status

from serving.errors import ShuttingDown, to_status
from serving.lifecycle import Lifecycle
from serving.metrics import Metrics
from serving.violations import FieldViolation, ValidationError

#: The services wrapped: jobgate's own, and KEDA's externalscaler.ExternalScaler.
WRAPPED_PREFIXES = ("/jobgate.v1.", "/externalscaler.")
_CODE_NAMES = {code.value[0]: code.name for code in grpc.StatusCode}

# The aio context (the stubs lack abort_with_status, hence Any).
Context = Any
UnaryBehavior = Callable[[Any, Context], Awaitable[Any]]
StreamBehavior = Callable[[Any, Context], AsyncGenerator[Any, None]]

if TYPE_CHECKING:
    _Interceptor = grpc.aio.ServerInterceptor[Any, Any]
    _Handler = grpc.RpcMethodHandler[Any, Any]
else:
    _Interceptor = grpc.aio.ServerInterceptor
    _Handler = grpc.RpcMethodHandler


class _Undecodable:
    """Stands in for a request whose bytes did not parse."""


_UNDECODABLE = _Undecodable()


def _safe(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception:
            return _UNDECODABLE

    return deserialize


class _Method:
    """What every call of one method shares: its labels' metric children, found once
    (a `labels()` lookup costs about 0.9 us, three a call on the hot path)."""

    def __init__(self, interceptor: ServingInterceptor, kind: str, method: str) -> None:
        service, _, name = method.lstrip("/").rpartition("/")
        metrics = interceptor.metrics
        self.lifecycle = interceptor.lifecycle
        self.method = method
        self.labels = (kind, service, name)
        self.started = metrics.grpc_started.labels(*self.labels)
        self.handling = metrics.grpc_handling.labels(*self.labels)
        self._handled = metrics.grpc_handled
        self._handled_by_code: dict[str, Any] = {}

    def handled(self, code: str) -> Any:
        child = self._handled_by_code.get(code)
        if child is None:
            child = self._handled_by_code[code] = self._handled.labels(*self.labels, code)
        return child


class _Call:
    """Bookkeeping of one call: drain gate, in-flight count, metrics, status."""

    __slots__ = ("_counted", "_method", "_start", "code")

    def __init__(self, method: _Method) -> None:
        self._method = method
        self._start = time.perf_counter()
        self.code = "OK"
        self._counted = False

    def begin(self, request: Any) -> None:
        self._method.started.inc()
        self._method.lifecycle.enter()
        if request is _UNDECODABLE:
            raise ValidationError([FieldViolation("request", "is not a valid message")])
        if self._method.lifecycle.draining:
            raise ShuttingDown()

    async def fail(self, error: BaseException, context: Context) -> None:
        """Record why the call ended; abort with the mapped status if it is ours."""
        if isinstance(error, grpc.aio.AbortError):
            self.code = _code_name(context.code())
            return
        if not isinstance(error, Exception):  # cancelled, generator closed, interrupt
            self.code = "CANCELLED"
            return
        status: status_pb2.Status = to_status(error, self._method.method)
        self.code = _CODE_NAMES.get(status.code, "UNKNOWN")
        # counted before the status leaves, as an answer is counted before it is
        # sent: whoever saw the answer finds it in the metrics
        self._handled()
        await context.abort_with_status(rpc_status.to_status(status))

    def end(self) -> None:
        self._method.lifecycle.leave()
        self._handled()

    def _handled(self) -> None:
        if self._counted:
            return
        self._counted = True
        self._method.handled(self.code).inc()
        self._method.handling.observe(time.perf_counter() - self._start)

    @contextlib.asynccontextmanager
    async def running(self, request: Any, context: Context) -> AsyncIterator[None]:
        """The call's life around its behavior: begin, fail on any way out but success, end."""
        try:
            self.begin(request)
            yield
        except BaseException as error:
            await self.fail(error, context)
            raise
        finally:
            self.end()


def _code_name(code: grpc.StatusCode | None) -> str:
    return "OK" if code is None else code.name


class ServingInterceptor(_Interceptor):
    def __init__(self, lifecycle: Lifecycle, metrics: Metrics) -> None:
        self.lifecycle = lifecycle
        self.metrics = metrics
        # A method's handler never changes once the server runs, so each is
        # wrapped once, not on every call (this runs on the hot path).
        self._wrapped: dict[str, _Handler] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[_Handler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> _Handler:
        method: str = handler_call_details.method
        wrapped = self._wrapped.get(method)
        if wrapped is not None:
            return wrapped
        handler = await continuation(handler_call_details)
        if handler is None or not method.startswith(WRAPPED_PREFIXES):
            return handler
        wrapped = self._wrap(method, handler)
        self._wrapped[method] = wrapped
        return wrapped

    def _wrap(self, method: str, handler: _Handler) -> _Handler:
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._wrap_unary(method, cast(UnaryBehavior, handler.unary_unary)),
                request_deserializer=_safe(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._wrap_stream(method, cast(StreamBehavior, handler.unary_stream)),
                request_deserializer=_safe(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        return handler

    def _wrap_unary(self, method: str, behavior: UnaryBehavior) -> UnaryBehavior:
        shared = _Method(self, "unary", method)

        async def unary(request: Any, context: Context) -> Any:
            # Call.running written out: this runs on every unary call
            call = _Call(shared)
            try:
                call.begin(request)
                return await behavior(request, context)
            except BaseException as error:
                await call.fail(error, context)
                raise
            finally:
                call.end()

        return unary

    def _wrap_stream(self, method: str, behavior: StreamBehavior) -> StreamBehavior:
        shared = _Method(self, "server_stream", method)

        async def stream(request: Any, context: Context) -> AsyncGenerator[Any, None]:
            async with (
                _Call(shared).running(request, context),
                contextlib.aclosing(behavior(request, context)) as responses,
            ):
                async for response in responses:
                    yield response

        return stream
