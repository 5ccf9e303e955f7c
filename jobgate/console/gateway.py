"""The console's side of JobService: one JobClient per credential, and sign-in checks.

Every page calls with one credential: the signed-in person's token (token
sign-in) or the console's own. A JobClient (one channel) is kept per
distinct token and closed when no session uses it any more, so a thousand
page views of one person share one channel.

Calls are short (a page should fail fast when the gateway is down) and
retried only on UNAVAILABLE, twice: an admission refusal of a Retry is shown
to the person, not waited out.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import replace
from enum import Enum

import grpc

from jobgate.client import ConnectionConfig, JobClient, RetryPolicy
from jobgate.errors import JobgateError

log = logging.getLogger("jobgate.console")

CALL_TIMEOUT = 10.0
RETRY = RetryPolicy(
    max_attempts=3, initial_backoff=0.1, retry_codes=frozenset({grpc.StatusCode.UNAVAILABLE})
)
#: A well-formed id no job has: Get on it is NOT_FOUND for any valid credential.
PROBE_JOB_ID = "00000000000000000000000000"


class TokenCheck(Enum):
    VALID = "valid"
    UNKNOWN = "unknown token"
    NOT_A_CLIENT = "this token may not call JobService (a worker token?)"
    GATEWAY_OPEN = "the gateway runs without --auth-file, so a token proves nothing"


class Gateway:
    """JobClients by token; `client(None)` uses the console's own credentials."""

    def __init__(self, config: ConnectionConfig) -> None:
        self.config = config
        self._clients: dict[str | None, JobClient] = {}

    def client(self, token: str | None) -> JobClient:
        found = self._clients.get(token)
        if found is None:
            config = self.config if token is None else replace(self.config, token=token)
            found = JobClient(config=config, timeout=CALL_TIMEOUT, retry=RETRY)
            self._clients[token] = found
        return found

    async def forget_unused(self, tokens_in_use: Iterable[str]) -> None:
        """Close the clients of tokens no session holds any more."""
        keep = set(tokens_in_use)
        for token in [t for t in self._clients if t is not None and t not in keep]:
            await self._clients.pop(token).close()

    async def check_token(self, token: str) -> TokenCheck:
        """Whether `token` is a JobService credential of an authenticating gateway.

        Raises JobgateError when the gateway cannot answer (UNAVAILABLE, ...).
        """
        if await self._probe(None) is not grpc.StatusCode.UNAUTHENTICATED:
            return TokenCheck.GATEWAY_OPEN
        code = await self._probe(token)
        if code is grpc.StatusCode.NOT_FOUND:
            return TokenCheck.VALID
        if code is grpc.StatusCode.PERMISSION_DENIED:
            return TokenCheck.NOT_A_CLIENT
        return TokenCheck.UNKNOWN

    async def _probe(self, token: str | None) -> grpc.StatusCode | None:
        # Without a token the probe must send none, whatever the console's own is.
        config = replace(self.config, token=token)
        async with JobClient(config=config, timeout=CALL_TIMEOUT, retry=RETRY) as probe:
            try:
                await probe.get(PROBE_JOB_ID)
            except JobgateError as error:
                if error.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise
                return error.code
        return None

    async def close(self) -> None:
        for client in self._clients.values():
            await client.close()
        self._clients.clear()
