"""A running `jobgate serve`: its /metrics passes `promtool check metrics`, its
health answers the container probe (deploy/healthcheck.py)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.promql import dashboard_queries, metric_names
from tests.deploy.servers import JobgateProcess, submit
from tests.deploy.tools import DEPLOY, promtool
from tests.redis_server import free_port

HEALTHCHECK = DEPLOY / "healthcheck.py"


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JobgateProcess]:
    """`jobgate serve` on the embedded store, with one job submitted."""
    server = JobgateProcess(
        "serve", tmp_path_factory.mktemp("serve"), "--worker-listen", f"127.0.0.1:{free_port()}"
    )
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


def run_healthcheck(*args: str, env: dict[str, str] | None = None) -> int:
    done = subprocess.run(
        [sys.executable, str(HEALTHCHECK), *args],
        capture_output=True,
        env=env,
        timeout=30,
        check=False,
    )
    return done.returncode


def test_container_healthcheck_passes_on_a_serving_server(serve: JobgateProcess) -> None:
    assert run_healthcheck(serve.target) == 0


def test_container_healthcheck_reads_the_listen_address_from_the_environment(
    serve: JobgateProcess,
) -> None:
    listen = f"0.0.0.0:{serve.port}"  # as the image sets JOBGATE_LISTEN
    assert run_healthcheck(env={"JOBGATE_LISTEN": listen, "PATH": ""}) == 0


def test_container_healthcheck_fails_when_nothing_answers(tmp_path: Path) -> None:
    assert run_healthcheck(f"127.0.0.1:{free_port()}") == 1


def test_every_metric_the_alerts_and_dashboard_read_is_served(serve: JobgateProcess) -> None:
    served = {line.split()[2] for line in serve.scrape().splitlines() if line.startswith("# TYPE ")}
    alerts = (DEPLOY / "prometheus" / "alerts.yml").read_text()
    read = metric_names(alerts).union(*map(metric_names, dashboard_queries()))
    assert read <= served, read - served
