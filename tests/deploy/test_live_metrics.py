"""A running `jobgate serve`: its /metrics passes `promtool check metrics` and
serves every metric the alerts and the dashboard read."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from tests.deploy.promql import dashboard_queries, metric_names
from tests.deploy.servers import JobgateProcess, submit
from tests.deploy.tools import DEPLOY, promtool


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobgateProcess]:
    """`jobgate serve` on the embedded store, with one job submitted."""
    server = JobgateProcess("serve", tmp_path_factory.mktemp("serve"))
    try:
        server.wait_serving()
        submit(server.target, "text-stats")
        yield server
    finally:
        assert server.stop() == 0, server.output()


def test_live_scrape_passes_promtool_check_metrics(serve: JobgateProcess) -> None:
    scrape = serve.scrape()
    assert "jobgate_jobs_submitted_total{" in scrape
    done = subprocess.run(
        [promtool(), "check", "metrics"],
        input=scrape,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_live_scrape_has_every_designed_metric(serve: JobgateProcess) -> None:
    families = {
        line.split()[2] for line in serve.scrape().splitlines() if line.startswith("# TYPE ")
    }
    assert {
        "jobgate_jobs_submitted_total",
        "jobgate_jobs_finished_total",
        "jobgate_queue_depth",
        "jobgate_jobs_in_flight",
        "jobgate_queue_wait_seconds",
        "jobgate_job_duration_seconds",
        "jobgate_leases_expired_total",
        "jobgate_store_up",
        "jobgate_store_errors_total",
        "grpc_server_started_total",
        "grpc_server_handled_total",
        "grpc_server_handling_seconds",
    } <= families


def test_every_metric_the_alerts_and_dashboard_read_is_served(serve: JobgateProcess) -> None:
    served = {line.split()[2] for line in serve.scrape().splitlines() if line.startswith("# TYPE ")}
    alerts = (DEPLOY / "prometheus" / "alerts.yml").read_text()
    read = metric_names(alerts).union(*map(metric_names, dashboard_queries()))
    assert read <= served, read - served
