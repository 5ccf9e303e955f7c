"""deploy/prometheus is accepted by promtool, and the alert unit tests pass."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from tests.deploy.tools import DEPLOY, promtool, run_tool

PROMETHEUS_DIR = DEPLOY / "prometheus"
ALERTS = PROMETHEUS_DIR / "alerts.yml"
EXPECTED_ALERTS = {
    "JobgateQueueBackingUp",
    "JobgateQueueWaitHigh",
    "JobgateStoreDown",
    "JobgateLeasesExpiring",
    "JobgateNoWorkersClaiming",
    "JobgatePoolHasNoWorker",
    "JobgateTargetDown",
}


def test_prometheus_config_passes_promtool_check_config() -> None:
    run_tool(promtool(), "check", "config", str(PROMETHEUS_DIR / "prometheus.yml"))


def test_alert_rules_pass_promtool_check_rules() -> None:
    run_tool(promtool(), "check", "rules", str(ALERTS))


def test_alert_unit_tests_pass_promtool_test_rules() -> None:
    output = run_tool(promtool(), "test", "rules", "alerts_test.yml", cwd=PROMETHEUS_DIR)
    assert "SUCCESS" in output


def test_every_alert_has_a_unit_test_and_a_runbook_entry() -> None:
    rules = ALERTS.read_text()
    defined = set(re.findall(r"^\s*- alert: (\w+)", rules, re.MULTILINE))
    assert defined == EXPECTED_ALERTS
    tested = set(re.findall(r"alertname: (\w+)", (PROMETHEUS_DIR / "alerts_test.yml").read_text()))
    assert tested == defined
    runbook = (DEPLOY.parent / "docs" / "operations.md").read_text()
    for name in defined:
        assert f"`{name}`" in runbook, f"{name} has no entry in docs/operations.md"


def test_promtool_test_rules_fails_when_an_alert_misbehaves(tmp_path: Path) -> None:
    # A guard that the unit tests can fail at all: drop the store-down alert's
    # `for` and the "quiet while pending" case must catch it.
    shutil.copy(PROMETHEUS_DIR / "alerts_test.yml", tmp_path)
    broken = ALERTS.read_text().replace(
        "expr: jobgate_store_up == 0\n        for: 1m",
        "expr: jobgate_store_up == 0\n        for: 0m",
    )
    assert broken != ALERTS.read_text()
    (tmp_path / "alerts.yml").write_text(broken)
    done = subprocess.run(
        [promtool(), "test", "rules", "alerts_test.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode != 0
    assert "JobgateStoreDown" in done.stdout + done.stderr
