"""How a failed JobService call reads on a page: an HTTP status and one sentence.

The gateway's message is shown (escaped, and the gateway quotes at most 128
bytes of any input) after a sentence of our own for each code, so a person
knows whether to fix the filter, sign in, ask for an admin token or wait.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from jobgate.errors import JobgateError

_BY_CODE: dict[grpc.StatusCode, tuple[int, str]] = {
    grpc.StatusCode.INVALID_ARGUMENT: (400, "The gateway refused the request"),
    grpc.StatusCode.UNAUTHENTICATED: (401, "The gateway did not accept the credentials"),
    grpc.StatusCode.PERMISSION_DENIED: (403, "This token may not do that"),
    grpc.StatusCode.NOT_FOUND: (404, "No such job (or not one this token may see)"),
    grpc.StatusCode.FAILED_PRECONDITION: (409, "Not possible in the job's current state"),
    grpc.StatusCode.RESOURCE_EXHAUSTED: (429, "The gateway is at a limit; try again later"),
    grpc.StatusCode.UNIMPLEMENTED: (501, "The gateway does not serve this yet"),
    grpc.StatusCode.UNAVAILABLE: (503, "The gateway is unavailable"),
    grpc.StatusCode.DEADLINE_EXCEEDED: (504, "The gateway did not answer in time"),
}


@dataclass(frozen=True)
class Problem:
    status: int
    headline: str
    detail: str
    #: A limit to explain rather than a failure (shown calmer).
    info: bool = False

    @property
    def text(self) -> str:
        return f"{self.headline}: {self.detail}" if self.detail else self.headline


def problem(error: JobgateError) -> Problem:
    default = (502, "The gateway answered with an error")
    status, headline = _BY_CODE.get(error.code, default) if error.code else default
    return Problem(status, headline, str(error))
