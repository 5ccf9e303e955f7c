"""A real Prometheus server scrapes a running gateway and worker-server.

The config is deploy/prometheus/prometheus.yml with the jobgate targets
pointed at the live processes (on the session redis-server) and 1 s
intervals; it loads deploy/prometheus/alerts.yml as shipped.
"""

from __future__ import annotations

import json
import subprocess
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.promql import dashboard_queries
from tests.deploy.servers import JobgateProcess, submit
from tests.deploy.tools import DEPLOY, load_yaml_documents, require_module, require_tool
from tests.helpers import wait_until
from tests.redis_server import RedisServer, free_port

pytestmark = pytest.mark.redis

SCRAPE_DEADLINE = 30.0


@dataclass
class Stack:
    gateway: JobgateProcess
    worker_server: JobgateProcess
    prometheus_url: str
    job_id: str


class Prometheus:
    def __init__(self, workdir: Path, config: dict[str, Any]) -> None:
        yaml = require_module("yaml", "pip install -e '.[dev]'")
        binary = require_tool("prometheus", "apt-get install prometheus")
        self.port = free_port()
        config_file = workdir / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(config))
        self.log = workdir / "prometheus.log"
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [binary, f"--config.file={config_file}",
                 f"--storage.tsdb.path={workdir / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}"],
                stdout=out,
                stderr=out,
            )  # fmt: skip

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


def scrape_config(gateway: JobgateProcess, worker_server: JobgateProcess) -> dict[str, Any]:
    """The shipped prometheus.yml, aimed at the live processes, scraping every second."""
    (config,) = load_yaml_documents(DEPLOY / "prometheus" / "prometheus.yml")
    config["global"] = {
        "scrape_interval": "1s",
        "scrape_timeout": "1s",
        "evaluation_interval": "1s",
    }
    config["rule_files"] = [str(DEPLOY / "prometheus" / rule) for rule in config["rule_files"]]
    targets = {
        "jobgate-gateway": f"127.0.0.1:{gateway.metrics_port}",
        "jobgate-worker-server": f"127.0.0.1:{worker_server.metrics_port}",
    }
    jobs = [job for job in config["scrape_configs"] if job["job_name"] in targets]
    assert len(jobs) == 2, "prometheus.yml must scrape both servers"
    for job in jobs:
        job["static_configs"][0]["targets"] = [targets[job["job_name"]]]
    config["scrape_configs"] = jobs
    return config


@pytest.fixture(scope="module")
def stack(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("prometheus")
    redis = ["--redis-url", redis_server.url, "--redis-partition", f"p{uuid.uuid4().hex[:12]}"]
    gateway = JobgateProcess("gateway", workdir, *redis)
    worker_server = JobgateProcess("worker-server", workdir, *redis)
    prometheus: Prometheus | None = None
    try:
        gateway.wait_serving()
        worker_server.wait_serving()
        job_id = submit(gateway.target, "text-stats")
        prometheus = Prometheus(workdir, scrape_config(gateway, worker_server))
        yield Stack(gateway, worker_server, prometheus.url, job_id)
    finally:
        if prometheus is not None:
            prometheus.stop()
        assert gateway.stop() == 0, gateway.output()
        assert worker_server.stop() == 0, worker_server.output()


def shipped_rule_count() -> int:
    (rules,) = load_yaml_documents(DEPLOY / "prometheus" / "alerts.yml")
    return sum(len(group["rules"]) for group in rules["groups"])


def api(stack: Stack, path: str, **params: str) -> Any:
    url = f"{stack.prometheus_url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            body = json.load(reply)
    except urllib.error.HTTPError as error:
        if error.code == 503:
            return None  # still starting up ("Service Unavailable", not JSON)
        body = json.load(error)  # a bad query: Prometheus explains in the body
    except OSError:
        return None  # not listening yet
    assert body["status"] == "success", body
    return body["data"]


def query(stack: Stack, promql: str) -> list[dict[str, Any]]:
    data = api(stack, "query", query=promql)
    return [] if data is None else list(data["result"])


def test_prometheus_scrapes_gateway_and_worker_server(stack: Stack) -> None:
    def both_up() -> bool:
        up = {r["metric"]["job"]: r["value"][1] for r in query(stack, 'up{job=~"jobgate-.*"}')}
        return up == {"jobgate-gateway": "1", "jobgate-worker-server": "1"}

    wait_until(both_up, SCRAPE_DEADLINE, "both jobgate targets up in Prometheus")


def test_prometheus_sees_the_submitted_job(stack: Stack) -> None:
    def counted() -> bool:
        result = query(stack, 'sum(jobgate_jobs_submitted_total{model="text-stats"})')
        return bool(result) and float(result[0]["value"][1]) >= 1

    wait_until(counted, SCRAPE_DEADLINE, "jobgate_jobs_submitted_total > 0 in Prometheus")


def test_prometheus_sees_the_queued_job_once_across_replicas(stack: Stack) -> None:
    # Both servers export the store-wide depth; the recording rule counts it once.
    def depth_is_one() -> bool:
        result = query(stack, 'jobgate:queue_depth_by_model:sum{model="text-stats"}')
        return bool(result) and result[0]["value"][1] == "1"

    wait_until(depth_is_one, SCRAPE_DEADLINE, "one queued text-stats job in Prometheus")


def test_prometheus_evaluates_every_shipped_rule_without_error(stack: Stack) -> None:
    def all_ok() -> bool:
        data = api(stack, "rules")
        if data is None:
            return False
        rules = [rule for group in data["groups"] for rule in group["rules"]]
        assert not [r for r in rules if r["health"] == "err"], rules
        return len(rules) == shipped_rule_count() and all(r["health"] == "ok" for r in rules)

    wait_until(all_ok, SCRAPE_DEADLINE, "all alert and recording rules healthy")


def test_every_dashboard_query_runs_on_the_real_server(stack: Stack) -> None:
    wait_until(lambda: api(stack, "query", query="up") is not None, SCRAPE_DEADLINE)
    for promql in dashboard_queries():
        api(stack, "query", query=promql)  # asserts status "success"
