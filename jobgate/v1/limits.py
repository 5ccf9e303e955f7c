"""The API contract's limits, hand-written beside the generated stubs.

The proto comments state these; the servers enforce them (`serving.violations`)
and the client and worker daemon keep to them (a worker cuts a stage or an
error message to fit instead of having every call refused). One definition
each: change a limit here and in the proto comment, nowhere else.
"""

from __future__ import annotations

import re

#: A job id is a ULID: 26 characters of Crockford base32 (either case).
JOB_ID_PATTERN = re.compile(r"[0-7][0-9A-HJKMNP-TV-Z]{25}", re.IGNORECASE)
MODEL_PATTERN = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
#: A worker pool's name: the model rule (JobSpec.pool, ClaimNextRequest.pool, the auth file).
POOL_PATTERN = MODEL_PATTERN
ERROR_CODE_PATTERN = re.compile(r"[A-Z][A-Z0-9_]{0,63}")

MAX_LABELS = 64
MAX_LABEL_KEY_BYTES = 63
MAX_LABEL_VALUE_BYTES = 255
MAX_CONTENT_TYPE_BYTES = 255
MAX_ATTEMPTS = 100
MAX_IDEMPOTENCY_KEY_BYTES = 128
MAX_WORKER_ID_BYTES = 128
MAX_MODELS = 32
MAX_WAIT_SECONDS = 60
#: ClaimNext returns at most this many jobs (max_jobs above it is refused).
MAX_JOBS_PER_CLAIM = 64
#: ReportAndClaim carries at most this many results, and as many heartbeats.
MAX_REPORTS_PER_CALL = 64
MAX_LEASE_ID_BYTES = 128
MAX_STAGE_BYTES = 128
#: SetResult's error_message, in UTF-8 bytes.
MAX_ERROR_MESSAGE_BYTES = 4096
MAX_CANCEL_REASON_BYTES = 1024
#: Durations beyond this are surely mistakes (and overflow some clocks).
MAX_DURATION_SECONDS = 10 * 365 * 24 * 3600
#: ListJobs: page_size 0 means DEFAULT_PAGE_SIZE; above MAX_PAGE_SIZE means that.
DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 1000
#: ListJobs' filter, in UTF-8 bytes (enough for every field and a few labels).
MAX_FILTER_BYTES = 4096
#: ListJobs' page_token; the servers' own tokens are far shorter.
MAX_PAGE_TOKEN_BYTES = 512
#: An error answer quotes at most this many bytes of any input value, so the
#: status and its details fit gRPC's default 16 KiB metadata limit.
MAX_QUOTED_INPUT_BYTES = 128


def clip_utf8(text: str, limit: int) -> str:
    """`text` cut to at most `limit` UTF-8 bytes, never inside a character."""
    encoded = text.encode()
    if len(encoded) <= limit:
        return text
    return encoded[:limit].decode(errors="ignore")
