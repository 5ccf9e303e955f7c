"""The example handlers do what docs/handlers.md says, called directly with a JobContext."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest

from examples import handlers
from jobgate import JobContext, RetryableError
from jobgate.v1 import job_pb2

SAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample.txt"


def context(payload: bytes, content_type: str = "text/plain", **labels: str) -> JobContext:
    job = job_pb2.Job(id="01TEST", model="m", content_type=content_type, labels=labels, attempts=1)
    return JobContext(job, payload)


def test_text_stats_counts_words_lines_and_top_words() -> None:
    ctx = context(b"Red fish, blue fish.\nOne fish, two fish!\n")

    stats = json.loads(handlers.text_stats(ctx))

    assert stats["words"] == 8
    assert stats["lines"] == 2
    assert stats["sentences"] == 2
    assert next(iter(stats["top_words"].items())) == ("fish", 4)
    assert ctx.result_content_type == "application/json"
    assert ctx.progress == (1.0, "done")


def test_text_stats_reads_the_text_of_html() -> None:
    ctx = context(b"<p>Hello <b>world</b> &amp; friends</p>", content_type="text/html")

    stats = json.loads(handlers.text_stats(ctx))

    assert stats["words"] == 3


def test_text_stats_on_the_sample_document_gives_a_reading_time() -> None:
    stats = json.loads(handlers.text_stats(context(SAMPLE.read_bytes())))

    assert stats["words"] > 300
    assert 1 < stats["reading_time_minutes"] < 3
    assert stats["paragraphs"] == 7


def test_staged_reports_every_stage_in_order() -> None:
    seen: list[str] = []
    ctx = context(b"a good and clear text", stage_seconds="0.01")
    ctx._on_report = lambda: seen.append(ctx.progress[1])

    result = json.loads(handlers.staged(ctx))

    stages = list(dict.fromkeys(seen))
    assert stages == ["download", "preprocess", "infer", "postprocess"]
    assert result["label"] == "positive"


def test_staged_stops_early_when_cancelled() -> None:
    ctx = context(b"text", stage_seconds="5")
    threading.Timer(0.1, ctx._cancel).start()

    assert json.loads(handlers.staged(ctx)) == {"cancelled_in": "download"}


def test_staged_asks_for_a_retry_on_an_empty_payload() -> None:
    with pytest.raises(RetryableError):
        handlers.staged(context(b"", stage_seconds="0"))


def test_summarize_picks_whole_sentences_from_the_text() -> None:
    summary = asyncio.run(handlers.summarize(context(SAMPLE.read_bytes())))

    assert 0 < len(summary) < len(SAMPLE.read_text())
    assert summary.endswith((".", "!", "?"))
