"""deploy/k8s/keda/: the ScaledObject uses only KEDA's documented fields, and ours.

KEDA's CRD schema is not in kubernetes-validate, so the fields are checked
against a small schema written here from KEDA's documentation, v2.17:
"ScaledObject specification" (keda.sh/docs/2.17/reference/scaledobject-spec,
kedacore/keda-docs content/docs/2.17/reference/scaledobject-spec.md at
1c38cb742975a28ea20b857b39f8cb2adfb60a62) for the spec and trigger fields,
and "External Push" (keda.sh/docs/latest/scalers/external-push) for the
external-push trigger's own metadata keys. The rest of the metadata (model,
pool, targetJobsPerWorker) is ours: it is checked by the scaler's own
parser, and against the Deployment and Service it must agree with.
"""

from __future__ import annotations

from typing import Any

from gateway_server.scaler import scaler_request
from jobgate.keda import externalscaler_pb2 as keda
from tests.deploy.tools import DEPLOY, load_yaml_documents, require_module

SCALED_OBJECT = DEPLOY / "k8s" / "keda" / "scaledobject.yaml"
WORKER = DEPLOY / "k8s" / "worker.yaml"
GATEWAY = DEPLOY / "k8s" / "gateway.yaml"

_STRING = {"type": "string"}
_COUNT = {"type": "integer", "minimum": 0}
# external-push's documented metadata keys, then the keys jobgate's scaler reads
_PUSH_KEYS = ["scalerAddress", "caCert", "tlsCertFile", "tlsClientCert", "tlsClientKey"]
_PUSH_KEYS += ["unsafeSsl"]
_JOBGATE_KEYS = ("model", "pool", "targetJobsPerWorker")

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "metadata": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": _STRING,
                "namespace": _STRING,
                "labels": {"type": "object", "additionalProperties": _STRING},
                "annotations": {"type": "object", "additionalProperties": _STRING},
            },
            "additionalProperties": False,
        },
        "spec": {
            "type": "object",
            "required": ["scaleTargetRef", "triggers"],
            "additionalProperties": False,
            "properties": {
                "scaleTargetRef": {
                    "type": "object",
                    "required": ["name"],
                    "additionalProperties": False,
                    "properties": {
                        "apiVersion": _STRING,
                        "kind": _STRING,
                        "name": _STRING,
                        "envSourceContainerName": _STRING,
                    },
                },
                "pollingInterval": _COUNT,
                "cooldownPeriod": _COUNT,
                "initialCooldownPeriod": _COUNT,
                "idleReplicaCount": _COUNT,
                "minReplicaCount": _COUNT,
                "maxReplicaCount": _COUNT,
                "fallback": {"type": "object"},
                "advanced": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "restoreToOriginalReplicaCount": {"type": "boolean"},
                        "horizontalPodAutoscalerConfig": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {"name": _STRING, "behavior": {"type": "object"}},
                        },
                        "scalingModifiers": {"type": "object"},
                    },
                },
                "triggers": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["type", "metadata"],
                        "additionalProperties": False,
                        "properties": {
                            "type": {"const": "external-push"},
                            "name": _STRING,
                            "useCachedMetrics": {"type": "boolean"},
                            "authenticationRef": {"type": "object"},
                            "metricType": {"enum": ["AverageValue", "Value"]},
                            "metadata": {
                                "type": "object",
                                "required": ["scalerAddress", "model"],
                                # KEDA passes every value on as a string
                                "additionalProperties": False,
                                "properties": {
                                    key: _STRING for key in (*_PUSH_KEYS, *_JOBGATE_KEYS)
                                }
                                | {"scalerAddress": {"type": "string", "pattern": r"^[^:]+:\d+$"}},
                            },
                        },
                    },
                },
            },
        },
    },
}


def scaled_object() -> dict[str, Any]:
    (document,) = load_yaml_documents(SCALED_OBJECT)
    return document


def trigger() -> dict[str, str]:
    (only,) = scaled_object()["spec"]["triggers"]
    metadata: dict[str, str] = only["metadata"]
    return metadata


def problems(document: dict[str, Any]) -> list[str]:
    jsonschema = require_module("jsonschema", "pip install -e '.[dev]'")
    validator = jsonschema.Draft202012Validator(SCHEMA)
    return [error.message for error in validator.iter_errors(document)]


def test_the_scaled_object_uses_only_documented_fields() -> None:
    assert problems(scaled_object()) == []


def test_the_schema_check_rejects_a_misspelt_field() -> None:
    broken = scaled_object()
    broken["spec"]["cooldownPeriods"] = 300
    assert any("cooldownPeriods" in problem for problem in problems(broken))


def test_the_schema_check_rejects_a_number_where_keda_wants_a_string() -> None:
    broken = scaled_object()
    broken["spec"]["triggers"][0]["metadata"]["targetJobsPerWorker"] = 2
    assert problems(broken)


def test_it_scales_the_worker_deployment() -> None:
    (deployment,) = load_yaml_documents(WORKER)
    assert scaled_object()["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]


def test_it_asks_the_gateway_service_on_its_grpc_port() -> None:
    services = [d for d in load_yaml_documents(GATEWAY) if d["kind"] == "Service"]
    gateway = next(s for s in services if s["metadata"]["name"] == "jobgate-gateway")
    grpc_port = next(p["port"] for p in gateway["spec"]["ports"] if p["name"] == "grpc")
    assert trigger()["scalerAddress"] == f"jobgate-gateway:{grpc_port}"


def worker_flag(flag: str) -> str:
    (deployment,) = load_yaml_documents(WORKER)
    args: list[str] = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    return args[args.index(flag) + 1]


def test_it_counts_the_model_the_workers_run_per_their_concurrency() -> None:
    assert trigger()["model"] == worker_flag("--model")
    assert trigger()["targetJobsPerWorker"] == worker_flag("--concurrency")


def test_the_gateway_accepts_its_metadata() -> None:
    checked = scaler_request(keda.ScaledObjectRef(scalerMetadata=trigger()))
    assert (checked.trigger.model, checked.target) == ("text-stats", 2)


def test_it_scales_to_zero() -> None:
    assert scaled_object()["spec"]["minReplicaCount"] == 0
