"""deploy/k8s and deploy/compose*.yaml pass schema checkers, and agree with the drain.

Kubernetes: `kubernetes-validate --strict` (PyPI; ships the Kubernetes JSON
schemas, so no network is needed), for the oldest version with native gRPC
probes (1.27) and the newest it knows. Compose: `check-jsonschema` with its
vendored compose-spec schema (`--builtin-schema vendor.compose-spec`); no Docker
engine runs here, so `docker compose config` is not available. The
single-node file's `serve` command and environment go through the servers'
own settings parser (serving/settings.py), as `jobgate serve` would read them.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from serving import settings as server_settings
from serving.settings import ServerSettings
from tests.deploy.tools import DEPLOY, load_yaml_documents, require_tool, run_tool

K8S = DEPLOY / "k8s"
MANIFESTS = sorted(K8S.glob("*.yaml"))
COMPOSE = DEPLOY / "compose.yaml"
SINGLE_NODE = DEPLOY / "compose.single-node.yaml"
PRESTOP_SECONDS = 5


def kubernetes_validate() -> str:
    return require_tool("kubernetes-validate", "pip install -e '.[dev]'")


def check_jsonschema() -> str:
    return require_tool("check-jsonschema", "pip install -e '.[dev]'")


def resources(kind: str) -> list[dict[str, Any]]:
    return [doc for path in MANIFESTS for doc in load_yaml_documents(path) if doc["kind"] == kind]


def server_deployments() -> list[dict[str, Any]]:
    names = {"jobgate-gateway", "jobgate-worker-server"}
    found = [d for d in resources("Deployment") if d["metadata"]["name"] in names]
    assert len(found) == 2
    return found


def settings() -> dict[str, str]:
    (config_map,) = resources("ConfigMap")
    data: dict[str, str] = config_map["data"]
    return data


@pytest.mark.parametrize("version", ["1.27.0", "1.37.0"])
def test_kubernetes_manifests_pass_strict_schema_validation(version: str) -> None:
    assert MANIFESTS
    output = run_tool(
        kubernetes_validate(), "--strict", "-k", version, *map(str, MANIFESTS), timeout=60
    )
    assert "ERROR" not in output


def test_kubernetes_validation_rejects_an_unknown_field(tmp_path: Path) -> None:
    # Guards the check above: a misspelt probe must not pass as "valid".
    broken = (K8S / "gateway.yaml").read_text().replace("readinessProbe:", "readinesProbe:")
    (tmp_path / "gateway.yaml").write_text(broken)
    with pytest.raises(AssertionError, match="readinesProbe"):
        run_tool(kubernetes_validate(), "--strict", str(tmp_path / "gateway.yaml"))


@pytest.mark.parametrize("path", [COMPOSE, SINGLE_NODE], ids=lambda path: path.name)
def test_compose_file_matches_the_compose_spec_schema(path: Path) -> None:
    run_tool(check_jsonschema(), "--builtin-schema", "vendor.compose-spec", str(path))


def test_compose_schema_check_rejects_a_misspelt_key(tmp_path: Path) -> None:
    broken = COMPOSE.read_text().replace("    stop_grace_period: 15s", "    stop_grace_perod: 15s")
    (tmp_path / "compose.yaml").write_text(broken)
    with pytest.raises(AssertionError, match="stop_grace_perod"):
        run_tool(
            check_jsonschema(),
            "--builtin-schema",
            "vendor.compose-spec",
            str(tmp_path / "compose.yaml"),
        )


def test_server_pods_outlive_prestop_plus_the_drain() -> None:
    grace = float(settings()["JOBGATE_GRACE_PERIOD"])
    for deployment in server_deployments():
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["lifecycle"]["preStop"]["exec"]["command"] == [
            "sleep",
            str(PRESTOP_SECONDS),
        ]
        assert pod["terminationGracePeriodSeconds"] > PRESTOP_SECONDS + grace


def test_server_probes_ask_the_grpc_health_service_on_the_listen_port() -> None:
    for deployment in server_deployments():
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        listen = next(e["value"] for e in container["env"] if e["name"] == "JOBGATE_LISTEN")
        port = int(listen.rpartition(":")[2])
        assert {"name": "grpc", "containerPort": port, "protocol": "TCP"} in container["ports"]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert container[probe]["grpc"] == {"port": port}, probe


def test_every_container_has_resource_requests_and_limits() -> None:
    for deployment in resources("Deployment"):
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            assert {"cpu", "memory"} <= container["resources"]["requests"].keys()
            assert {"cpu", "memory"} <= container["resources"]["limits"].keys()


def test_each_server_has_a_disruption_budget_and_services_selecting_its_pods() -> None:
    budgets = {b["metadata"]["name"]: b for b in resources("PodDisruptionBudget")}
    services = resources("Service")
    for deployment in server_deployments():
        name = deployment["metadata"]["name"]
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert budgets[name]["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
        selecting = [s for s in services if s["spec"]["selector"].items() <= pod_labels.items()]
        assert {s["metadata"]["name"] for s in selecting} == {name, f"{name}-headless"}


def test_servers_read_the_auth_file_from_the_secret_mount() -> None:
    auth_file = Path(settings()["JOBGATE_AUTH_FILE"])
    for deployment in server_deployments():
        pod = deployment["spec"]["template"]["spec"]
        (volume,) = (v for v in pod["volumes"] if "secret" in v)
        (mount,) = (m for m in pod["containers"][0]["volumeMounts"] if m["name"] == volume["name"])
        assert auth_file.parent == Path(mount["mountPath"])
        assert volume["secret"]["secretName"] == "jobgate-auth"


def test_settings_are_only_known_jobgate_variables() -> None:
    known = {
        "REDIS_URL", "LISTEN", "WORKER_LISTEN", "METRICS_LISTEN", "AUTH_FILE", "LEASE_TIMEOUT",
        "MAX_ATTEMPTS", "RUN_TIMEOUT", "RESULT_TTL", "QUEUE_TIMEOUT", "MAX_PAYLOAD_BYTES",
        "MAX_GROUP_CHILDREN", "MAX_LIVE_PER_TENANT", "MAX_LIVE_TOTAL", "REDIS_PARTITION",
        "RETRY_BACKOFF", "GRACE_PERIOD", "LOG_FORMAT", "LOG_LEVEL", "TLS_CERT", "TLS_KEY",
        "TLS_CLIENT_CA",
    }  # fmt: skip
    assert {name.removeprefix("JOBGATE_") for name in settings()} <= known


def test_compose_runs_every_role_and_stops_servers_after_their_drain() -> None:
    (compose,) = load_yaml_documents(COMPOSE)
    services = compose["services"]
    assert set(services) == {"redis", "gateway", "worker-server", "worker", "prometheus"}
    assert services["worker"]["command"][services["worker"]["command"].index("--handler") + 1] == (
        "examples.handlers:text_stats"
    )
    for name in ("gateway", "worker-server"):
        service = services[name]
        grace = float(service["environment"]["JOBGATE_GRACE_PERIOD"])
        assert float(service["stop_grace_period"].removesuffix("s")) > grace
    assert "./redis.conf:/usr/local/etc/redis/redis.conf:ro" in services["redis"]["volumes"]


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_worker_daemon_drains_within_its_pod_grace_period() -> None:
    (worker,) = (
        d
        for d in resources("Deployment")
        if d["metadata"]["labels"]["app.kubernetes.io/component"] == "worker"
    )
    pod = worker["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert float(flag(container["args"], "--grace-period")) < pod["terminationGracePeriodSeconds"]
    assert flag(container["args"], "--handler") == "examples.handlers:text_stats"
    assert flag(container["args"], "--model") == "text-stats"
    assert flag(container["args"], "--target") == "jobgate-worker-server:50052"


def test_compose_worker_drains_before_compose_kills_it() -> None:
    (compose,) = load_yaml_documents(COMPOSE)
    worker = compose["services"]["worker"]
    assert float(flag(worker["command"], "--grace-period")) < float(
        worker["stop_grace_period"].removesuffix("s")
    )


def test_prometheus_scrapes_the_compose_servers_on_their_metrics_port() -> None:
    (compose,) = load_yaml_documents(COMPOSE)
    (prometheus,) = load_yaml_documents(DEPLOY / "prometheus" / "prometheus.yml")
    targets = {
        target
        for job in prometheus["scrape_configs"]
        if job["job_name"].startswith("jobgate-")
        for config in job["static_configs"]
        for target in config["targets"]
    }
    expected = set()
    for name in ("gateway", "worker-server"):
        metrics = compose["services"][name]["environment"]["JOBGATE_METRICS_LISTEN"]
        expected.add(f"{name}:{metrics.rpartition(':')[2]}")
    assert targets == expected


def test_server_pods_advertise_their_metrics_port_for_scraping() -> None:
    metrics_port = settings()["JOBGATE_METRICS_LISTEN"].rpartition(":")[2]
    for deployment in server_deployments():
        template = deployment["spec"]["template"]
        (container,) = template["spec"]["containers"]
        assert template["metadata"]["annotations"]["prometheus.io/port"] == metrics_port
        assert {"name": "metrics", "containerPort": int(metrics_port), "protocol": "TCP"} in (
            container["ports"]
        )


def single_node_serve() -> tuple[dict[str, Any], ServerSettings]:
    """The single-node file's serve service, and the settings `jobgate serve` reads from it.

    Its command is parsed by the servers' own flags (an unknown flag fails
    here as it would fail `jobgate serve`), its environment as JOBGATE_<NAME>.
    """
    (compose,) = load_yaml_documents(SINGLE_NODE)
    serve = compose["services"]["serve"]
    command, *args = serve["command"]
    assert command == "serve"  # the image's ENTRYPOINT is jobgate
    parser = argparse.ArgumentParser(prog="jobgate serve")
    server_settings.add_flags(parser)
    parsed, unknown = parser.parse_known_args(args)
    assert unknown == [], f"flags jobgate serve does not accept: {unknown}"
    return serve, server_settings.from_args(parsed, environ=serve["environment"])


def test_single_node_serve_keeps_its_store_on_the_named_volume() -> None:
    (compose,) = load_yaml_documents(SINGLE_NODE)
    serve, settings = single_node_serve()
    assert settings.redis_url is None  # the embedded store
    assert settings.data_dir is not None and settings.data_sync == "full"
    mounts = {target: source for source, target, *_ in (v.split(":") for v in serve["volumes"])}
    volume = mounts[settings.data_dir]  # a volume is mounted on the data directory itself
    assert volume in compose["volumes"], f"{volume} is not a declared (named) volume"
    assert set(compose["services"]) == {"serve", "worker"}


def test_single_node_environment_is_only_jobgate_settings() -> None:
    serve, _ = single_node_serve()
    known = {flag.env for flag in server_settings.FLAGS}
    assert set(serve["environment"]) <= known


def test_single_node_publishes_serves_ports_and_probes_its_health_service() -> None:
    serve, settings = single_node_serve()
    assert settings.metrics_listen is not None
    published = {int(port.rpartition(":")[2]) for port in serve["ports"]}
    listens = (settings.listen, settings.worker_listen, settings.metrics_listen)
    assert published == {address.port for address in listens}
    assert all(address.host == "0.0.0.0" for address in listens)
    assert all(port.startswith("127.0.0.1:") for port in serve["ports"])
    # deploy/healthcheck.py asks grpc.health.v1 on JOBGATE_LISTEN: JobService's address
    # unless the command moved it with --listen
    assert serve["healthcheck"]["test"] == ["CMD", "python", "/app/healthcheck.py"]
    assert serve["environment"]["JOBGATE_LISTEN"] == str(settings.listen)


def test_single_node_worker_claims_from_serve_and_both_drain_before_compose_kills() -> None:
    (compose,) = load_yaml_documents(SINGLE_NODE)
    serve, settings = single_node_serve()
    worker = compose["services"]["worker"]
    assert flag(worker["command"], "--target") == f"serve:{settings.worker_listen.port}"
    assert worker["depends_on"]["serve"]["condition"] == "service_healthy"
    assert float(serve["stop_grace_period"].removesuffix("s")) > (
        settings.grace_period.total_seconds()
    )
    assert float(flag(worker["command"], "--grace-period")) < float(
        worker["stop_grace_period"].removesuffix("s")
    )
