"""Example worker handlers: real CPU work on an uploaded document, and staged progress.

Run one with the worker daemon from the repository root:

    jobgate worker --target 127.0.0.1:50052 --model text-stats \
        --handler examples.handlers:text_stats
    jobgate submit --model text-stats --file examples/sample.txt --wait
    jobgate get <ID>

Each handler takes a jobgate.JobContext and returns bytes, str or None.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
import time
from collections import Counter

from jobgate import JobContext, RetryableError

WORDS_PER_MINUTE = 238  # average silent reading speed for adult readers of English


def _wordset(text: str) -> frozenset[str]:
    return frozenset(text.split())


STOPWORDS = _wordset(
    """a about above after again against all am an and any are as at be because been
    before being below between both but by can did do does doing down during each few
    for from further had has have having he her here hers herself him himself his how i
    if in into is it its itself just me more most my myself no nor not now of off on
    once only or other our ours ourselves out over own same she should so some such
    than that the their theirs them themselves then there these they this those through
    to too under until up very was we were what when where which while who whom why
    will with you your yours yourself yourselves"""
)
_WORD = re.compile("[^\\W\\d_]+(?:['\u2019][^\\W\\d_]+)*")
_SENTENCE_END = re.compile(r"[.!?]+(?:\s|$)")
_TAG = re.compile(r"<[^>]+>")


def document_text(ctx: JobContext) -> str:
    """The payload as text; HTML is reduced to its text, undecodable bytes replaced."""
    text = ctx.payload.decode("utf-8", errors="replace")
    if "html" in ctx.content_type:
        text = html.unescape(_TAG.sub(" ", text))
    return text


def syllables(word: str) -> int:
    """A vowel-group estimate of English syllables (good enough for readability scores)."""
    groups = re.findall(r"[aeiouy]+", word.lower())
    count = len(groups) - (1 if word.lower().endswith("e") and len(groups) > 1 else 0)
    return max(1, count)


def text_stats(ctx: JobContext) -> str:
    """Word, line, sentence and paragraph counts, top words, reading time and ease, as JSON."""
    ctx.report(0.0, "read")
    text = document_text(ctx)
    ctx.report(0.2, "tokenize")
    words = _WORD.findall(text)
    lowered = [word.lower() for word in words]
    ctx.report(0.5, "count")
    sentences = max(1, len(_SENTENCE_END.findall(text))) if words else 0
    paragraphs = len([block for block in re.split(r"\n\s*\n", text) if block.strip()])
    content_words = Counter(word for word in lowered if word not in STOPWORDS and len(word) > 2)
    syllable_total = sum(syllables(word) for word in words)
    ctx.report(0.8, "score")
    stats = {
        "characters": len(text),
        "lines": len(text.splitlines()),
        "words": len(words),
        "unique_words": len(set(lowered)),
        "sentences": sentences,
        "paragraphs": paragraphs,
        "average_word_length": round(sum(map(len, words)) / len(words), 2) if words else 0,
        "reading_time_minutes": round(len(words) / WORDS_PER_MINUTE, 2),
        "flesch_reading_ease": _flesch(len(words), sentences, syllable_total),
        "top_words": dict(content_words.most_common(10)),
    }
    ctx.result_content_type = "application/json"
    ctx.report(1.0, "done")
    return json.dumps(stats, indent=2, ensure_ascii=False)


def _flesch(words: int, sentences: int, syllable_total: int) -> float:
    """Flesch reading ease: higher is easier (60-70 is plain English)."""
    if not words or not sentences:
        return 0.0
    score = 206.835 - 1.015 * (words / sentences) - 84.6 * (syllable_total / words)
    return round(score, 1)


STAGES = ("download", "preprocess", "infer", "postprocess")
_POSITIVE = _wordset("good great excellent happy clear fast reliable simple safe love")
_NEGATIVE = _wordset("bad poor slow broken lost fail failed error sad hard unsafe")


def staged(ctx: JobContext) -> str:
    """A pipeline in four stages that reports progress through each and honours cancel.

    The label `stage_seconds` (default 1) sets how long each stage takes, so the
    progress is easy to follow with `jobgate watch`. The "model" is a toy
    lexicon scorer; the shape (stages, progress, cancellation) is the point.
    """
    pause = float(ctx.labels.get("stage_seconds", "1"))
    steps = 5
    state: dict[str, object] = {}
    for index, stage in enumerate(STAGES):
        for step in range(steps):
            ctx.report((index + step / steps) / len(STAGES), stage)
            if ctx.cancel_event.wait(pause / steps):  # returns early once cancelled
                return json.dumps({"cancelled_in": stage})
        _STAGE_WORK[stage](ctx, state)
    ctx.report(1.0, "postprocess")
    ctx.result_content_type = "application/json"
    return json.dumps(state["result"])


def _download(ctx: JobContext, state: dict[str, object]) -> None:
    if not ctx.payload:
        # A missing input may be a transient upload problem: let jobgate retry.
        raise RetryableError("empty payload; the upload may not have finished")
    state["text"] = document_text(ctx)


def _preprocess(ctx: JobContext, state: dict[str, object]) -> None:
    state["tokens"] = [word.lower() for word in _WORD.findall(str(state["text"]))]


def _infer(ctx: JobContext, state: dict[str, object]) -> None:
    tokens = state["tokens"]
    assert isinstance(tokens, list)
    positive = sum(1 for token in tokens if token in _POSITIVE)
    negative = sum(1 for token in tokens if token in _NEGATIVE)
    state["scores"] = {"positive": positive, "negative": negative, "tokens": len(tokens)}


def _postprocess(ctx: JobContext, state: dict[str, object]) -> None:
    scores = state["scores"]
    assert isinstance(scores, dict)
    balance = scores["positive"] - scores["negative"]
    label = "positive" if balance > 0 else "negative" if balance < 0 else "neutral"
    state["result"] = {"label": label, **scores, "attempt": ctx.attempt}


_STAGE_WORK = {
    "download": _download,
    "preprocess": _preprocess,
    "infer": _infer,
    "postprocess": _postprocess,
}


async def summarize(ctx: JobContext) -> str:
    """An async handler: an extractive summary (the 3 sentences with the most frequent words).

    Async handlers run on the daemon's event loop, so they must not block it:
    CPU-heavy work belongs in a sync handler (run in its own thread) or in
    `asyncio.to_thread`, as here.
    """
    ctx.report(0.1, "split")
    text = document_text(ctx)
    summary = await asyncio.to_thread(_summary, text, 3)
    ctx.report(1.0, "done")
    return summary


def _summary(text: str, count: int) -> str:
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]
    frequency = Counter(
        word.lower() for word in _WORD.findall(text) if word.lower() not in STOPWORDS
    )

    def weight(sentence: str) -> float:
        words = [w.lower() for w in _WORD.findall(sentence)]
        return sum(frequency[w] for w in words) / (len(words) or 1)

    best = sorted(sorted(sentences, key=weight, reverse=True)[:count], key=sentences.index)
    return " ".join(best)


def sleepy(ctx: JobContext) -> str:
    """Sleep labels['seconds'] (default 5) in small steps; handy for trying cancel and drain."""
    seconds = float(ctx.labels.get("seconds", "5"))
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        ctx.report((time.monotonic() - started) / seconds, "sleeping")
        if ctx.cancel_event.wait(0.1):
            return "cancelled"
    return f"slept {seconds}s"
