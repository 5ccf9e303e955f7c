"""The PromQL that deploy/ ships: dashboard queries and the metric names they use."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.deploy.tools import DEPLOY

DASHBOARD = DEPLOY / "grafana" / "jobgate.json"

# DESIGN.md "Metrics", as exposed (histograms add _bucket/_sum/_count).
DESIGN_METRICS = frozenset(
    {
        "jobgate_jobs_submitted_total",
        "jobgate_jobs_finished_total",
        "jobgate_queue_depth",
        "jobgate_jobs_in_flight",
        "jobgate_queue_wait_seconds",
        "jobgate_job_duration_seconds",
        "jobgate_leases_expired_total",
        "jobgate_store_up",
        "jobgate_store_errors_total",
        "jobgate_pool_queue_depth",
        "jobgate_workers",
        "grpc_server_started_total",
        "grpc_server_handled_total",
        "grpc_server_handling_seconds",
    }
)
_METRIC = re.compile(r"\b((?:jobgate|grpc_server)_[a-z_]+)\b(?!\s*\()")
# Grafana's variables, replaced by what they expand to for a plain query.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$model": ".*"}


def load_dashboard() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def dashboard_queries() -> list[str]:
    """Every panel query, with Grafana's variables expanded."""
    queries = []
    for panel in panels(load_dashboard()):
        for target in panel["targets"]:
            expr: str = target["expr"]
            for variable, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(variable, value)
            queries.append(expr)
    return queries


def metric_names(expr: str) -> set[str]:
    """Metric families an expression reads (a histogram's _bucket/_count/_sum folded)."""
    names = set()
    for name in _METRIC.findall(expr):
        for suffix in ("_bucket", "_count", "_sum"):
            if name.endswith(suffix) and name.removesuffix(suffix).endswith("_seconds"):
                name = name.removesuffix(suffix)
        names.add(name)
    return names
