"""Our externalscaler.proto says on the wire what KEDA's says: names, numbers, types.

No PyPI or npm package ships KEDA's own externalscaler.proto (looked for on
2026-12-03: keda-dispatcher, datadog-keda and cloudcoil-models-keda on PyPI,
@kubernetes-models/keda on npm: CRD models, no proto; npm's search is not
reachable here), so no client can be generated from it at test time. The
servers are tested with a client generated from our proto instead
(tests/servers/test_keda_scaler.py), and this test holds our descriptors to
KEDA's contract as read from kedacore/keda,
pkg/scalers/externalscaler/externalscaler.proto at commit
125494be45e8ea3ba1bd734a697e4a5bcd397197 (the facts only: package, service,
methods, messages, field names, numbers, types and labels).

That file has a fifth method, StreamMetricSpec (optional: KEDA falls back to
GetMetricSpec when a scaler answers UNIMPLEMENTED); the gateway does not
serve it, since its metric spec never changes.
"""

from __future__ import annotations

import pytest
from google.protobuf.descriptor import FieldDescriptor

from jobgate.keda import externalscaler_pb2

PACKAGE = "externalscaler"
SERVICE = "ExternalScaler"
#: method -> (input, output, server streaming)
METHODS = {
    "IsActive": ("ScaledObjectRef", "IsActiveResponse", False),
    "StreamIsActive": ("ScaledObjectRef", "IsActiveResponse", True),
    "GetMetricSpec": ("ScaledObjectRef", "GetMetricSpecResponse", False),
    "GetMetrics": ("GetMetricsRequest", "GetMetricsResponse", False),
}
#: message -> {field: (number, type, repeated)}; "map" for map<string, string>
MESSAGES: dict[str, dict[str, tuple[int, str, bool]]] = {
    "ScaledObjectRef": {
        "name": (1, "string", False),
        "namespace": (2, "string", False),
        "scalerMetadata": (3, "map", True),
    },
    "IsActiveResponse": {"result": (1, "bool", False)},
    "GetMetricSpecResponse": {"metricSpecs": (1, "MetricSpec", True)},
    "MetricSpec": {
        "metricName": (1, "string", False),
        "targetSize": (2, "int64", False),
        "targetSizeFloat": (3, "double", False),
    },
    "GetMetricsRequest": {
        "scaledObjectRef": (1, "ScaledObjectRef", False),
        "metricName": (2, "string", False),
    },
    "GetMetricsResponse": {"metricValues": (1, "MetricValue", True)},
    "MetricValue": {
        "metricName": (1, "string", False),
        "metricValue": (2, "int64", False),
        "metricValueFloat": (3, "double", False),
    },
}
_SCALARS = {
    FieldDescriptor.TYPE_STRING: "string",
    FieldDescriptor.TYPE_BOOL: "bool",
    FieldDescriptor.TYPE_INT64: "int64",
    FieldDescriptor.TYPE_DOUBLE: "double",
}
FILE = externalscaler_pb2.DESCRIPTOR


def _type(field: FieldDescriptor) -> str:
    if field.type == FieldDescriptor.TYPE_MESSAGE:
        message = field.message_type
        assert message is not None
        if message.GetOptions().map_entry:
            key, value = message.fields_by_name["key"], message.fields_by_name["value"]
            both_strings = {key.type, value.type} == {FieldDescriptor.TYPE_STRING}
            return "map" if both_strings else f"map<{key.type},{value.type}>"
        return str(message.name)
    return _SCALARS.get(field.type, str(field.type))


def test_the_package_is_keda_s() -> None:
    assert FILE.package == PACKAGE


def test_the_service_has_keda_s_methods() -> None:
    service = FILE.services_by_name[SERVICE]
    found = {
        m.name: (m.input_type.name, m.output_type.name, m.server_streaming) for m in service.methods
    }
    assert found == METHODS
    assert not any(m.client_streaming for m in service.methods)


def test_the_messages_are_keda_s() -> None:
    assert set(FILE.message_types_by_name) == set(MESSAGES)


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_each_message_has_keda_s_fields(name: str) -> None:
    message = FILE.message_types_by_name[name]
    found = {f.name: (f.number, _type(f), f.is_repeated) for f in message.fields}
    assert found == MESSAGES[name]


def test_the_full_method_names_are_the_ones_keda_calls() -> None:
    service = FILE.services_by_name[SERVICE]
    assert [f"/{service.full_name}/{m.name}" for m in service.methods] == [
        f"/{PACKAGE}.{SERVICE}/{name}" for name in METHODS
    ]
