"""Browser sessions: who signed in, with which token, and their CSRF secret.

Sessions live in the console's memory only (a restart signs everyone out),
keyed by a random 256-bit id sent as the cookie; the cookie carries nothing
else. Every visitor gets one, signed in or not, because the CSRF secret that
every form carries (the login form too) is kept in it. A sign-in replaces
the session with a new id (no fixation). Expiry is absolute: `ttl` after
creation. The table is capped; past the cap the oldest session goes, so a
flood of cookie-less requests cannot grow it without bound.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

COOKIE = "jobgate_console"
MAX_SESSIONS = 10_000


@dataclass(frozen=True)
class Session:
    id: str
    csrf: str
    expires_at: float  # on the store's clock (monotonic)
    #: Who signed in ("" while nobody has).
    user: str = ""
    #: The person's own JobService token (token sign-in); None: the console's.
    token: str | None = None

    @property
    def signed_in(self) -> bool:
        return bool(self.user)

    def csrf_matches(self, candidate: str) -> bool:
        return hmac.compare_digest(self.csrf.encode(), candidate.encode())


class Sessions:
    """The session table; `clock` is injectable so tests can expire sessions."""

    def __init__(
        self,
        ttl: timedelta,
        clock: Callable[[], float] = time.monotonic,
        max_sessions: int = MAX_SESSIONS,
    ) -> None:
        self.ttl = ttl
        self._clock = clock
        self._max = max_sessions
        self._table: OrderedDict[str, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._table)

    def get(self, session_id: str | None) -> Session | None:
        """The live session for a cookie value, or None (unknown or expired)."""
        if not session_id:
            return None
        found = self._table.get(session_id)
        if found is None:
            return None
        if found.expires_at <= self._clock():
            del self._table[session_id]
            return None
        return found

    def new(self, user: str = "", token: str | None = None) -> Session:
        session = Session(
            id=secrets.token_urlsafe(32),
            csrf=secrets.token_urlsafe(32),
            expires_at=self._clock() + self.ttl.total_seconds(),
            user=user,
            token=token,
        )
        self._table[session.id] = session
        while len(self._table) > self._max:
            self._table.popitem(last=False)
        return session

    def sign_in(self, old: Session | None, user: str, token: str | None = None) -> Session:
        """A fresh session for `user`, replacing `old`."""
        self.end(old)
        return self.new(user, token)

    def end(self, session: Session | None) -> None:
        if session is not None:
            self._table.pop(session.id, None)

    def tokens_in_use(self) -> set[str]:
        return {s.token for s in self._table.values() if s.token is not None}
