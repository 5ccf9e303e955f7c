"""Percentiles and Markdown tables for the report."""

from __future__ import annotations

from collections.abc import Iterator, Sequence


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-quantile (nearest rank) of a non-empty sample."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def latency_cells(samples: Sequence[float]) -> list[str]:
    """p50, p95, p99 and max in milliseconds."""
    return [*(ms(percentile(samples, q)) for q in (0.50, 0.95, 0.99)), ms(max(samples))]


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> Iterator[str]:
    yield "| " + " | ".join(header) + " |"
    yield "|" + "|".join(" --- " for _ in header) + "|"
    for row in rows:
        yield "| " + " | ".join(row) + " |"
