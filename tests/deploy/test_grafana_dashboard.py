"""deploy/grafana/jobgate.json: valid, on a datasource variable, on DESIGN's metric names,
and every query is PromQL that promtool parses."""

from __future__ import annotations

from pathlib import Path

from tests.deploy.promql import (
    DESIGN_METRICS,
    dashboard_queries,
    load_dashboard,
    metric_names,
    panels,
)
from tests.deploy.tools import promtool, run_tool


def test_dashboard_has_a_prometheus_datasource_variable_used_by_every_query() -> None:
    dashboard = load_dashboard()
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    expected = {"type": "prometheus", "uid": "${datasource}"}
    for panel in panels(dashboard):
        assert panel["datasource"] == expected, panel["title"]
        assert all(t["datasource"] == expected for t in panel["targets"]), panel["title"]


def test_panel_ids_are_unique() -> None:
    ids = [p["id"] for p in load_dashboard()["panels"]]
    assert len(ids) == len(set(ids))


def test_queries_use_only_designed_metric_names() -> None:
    used = set().union(*map(metric_names, dashboard_queries()))
    assert used <= DESIGN_METRICS, used - DESIGN_METRICS


def test_dashboard_shows_what_operators_watch() -> None:
    queries = dashboard_queries()

    def shown(*fragments: str) -> bool:
        return any(all(f in q for f in fragments) for q in queries)

    assert shown("rate(jobgate_jobs_submitted_total")
    assert shown("rate(jobgate_jobs_finished_total")
    assert shown("sum by (priority)", "jobgate_queue_depth")
    for quantile in ("0.5", "0.95", "0.99"):
        assert shown(f"histogram_quantile({quantile}", "jobgate_queue_wait_seconds_bucket")
        assert shown(f"histogram_quantile({quantile}", "jobgate_job_duration_seconds_bucket")
    assert shown("jobgate_jobs_in_flight")
    assert shown("jobgate_leases_expired_total")
    assert shown("sum by (grpc_code)", "grpc_server_handled_total")
    assert shown("by (pool)", "jobgate_workers")
    assert shown("sum by (pool)", "jobgate_pool_queue_depth")


def test_every_query_parses_as_promql(tmp_path: Path) -> None:
    # promtool has no "check expression"; a recording rule per query makes
    # `promtool check rules` parse each one with Prometheus' own parser.
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for index, query in enumerate(dashboard_queries()):
        lines += [f"      - record: dashboard:query_{index}", f"        expr: '{query}'"]
    rules = tmp_path / "dashboard_rules.yml"
    rules.write_text("\n".join(lines) + "\n")
    output = run_tool(promtool(), "check", "rules", str(rules))
    assert f"SUCCESS: {len(dashboard_queries())} rules found" in output
