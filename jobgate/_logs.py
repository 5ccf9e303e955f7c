"""Structured logs on stderr: `--log-format text` (key=value) or `json` (one object a line).

Shared by the servers and the worker daemon, so one log pipeline reads both.
Fields travel as `extra={...}`.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")

# Attributes every LogRecord has; anything else came in through `extra`.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


def record_fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD}


def _time(record: logging.LogRecord) -> str:
    return datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _time(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(record_fields(record))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{k}={_text_value(v)}" for k, v in record_fields(record).items())
        line = f"{_time(record)} {record.levelname.lower()} {record.name}: {record.getMessage()}"
        line = f"{line} {fields}" if fields else line
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line


def _text_value(value: object) -> str:
    text = str(value)
    return json.dumps(text) if (" " in text or not text or '"' in text) else text


def configure(log_format: str, level: str, stream: TextIO | None = None) -> None:
    """Route the jobgate loggers to `stream` (stderr) in the chosen format."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # grpc's own loggers are chatty at INFO about connections.
    logging.getLogger("grpc").setLevel(max(logging.WARNING, root.level))
