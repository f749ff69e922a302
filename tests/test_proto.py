"""Generated stubs are reproducible from protos/ and match KEDA's wire contract."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from google.protobuf.descriptor import FieldDescriptor

from scaler._proto import externalscaler_pb2 as pb

REPO = Path(__file__).resolve().parent.parent
GENERATED = [
    "externalscaler_pb2.py",
    "externalscaler_pb2.pyi",
    "externalscaler_pb2_grpc.py",
    "externalscaler_pb2_grpc.pyi",
]


def test_stubs_do_not_drift_from_proto(tmp_path: Path) -> None:
    """Regenerate exactly as `make proto` does into a temp dir; any diff is drift."""
    (tmp_path / "protos").mkdir()
    shutil.copy(REPO / "protos" / "externalscaler.proto", tmp_path / "protos")
    bindir = Path(sys.executable).parent
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-Iscaler/_proto=protos",
            "--python_out=.",
            "--grpc_python_out=.",
            "--mypy_out=.",
            "--mypy_grpc_out=.",
            f"--plugin=protoc-gen-mypy={bindir / 'protoc-gen-mypy'}",
            f"--plugin=protoc-gen-mypy_grpc={bindir / 'protoc-gen-mypy_grpc'}",
            "protos/externalscaler.proto",
        ],
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    for name in GENERATED:
        fresh = (tmp_path / "scaler" / "_proto" / name).read_text()
        committed = (REPO / "scaler" / "_proto" / name).read_text()
        assert fresh == committed, f"scaler/_proto/{name} drifted from protos/: run `make proto`"


def test_wire_contract_matches_keda() -> None:
    """Package, service, RPCs, field names and numbers exactly as KEDA's externalscaler.proto."""
    fd = pb.DESCRIPTOR
    assert fd.package == "externalscaler"
    svc = fd.services_by_name["ExternalScaler"]
    assert svc.full_name == "externalscaler.ExternalScaler"
    methods = {
        m.name: (m.input_type.name, m.output_type.name, m.server_streaming) for m in svc.methods
    }
    assert methods == {
        "IsActive": ("ScaledObjectRef", "IsActiveResponse", False),
        "StreamIsActive": ("ScaledObjectRef", "IsActiveResponse", True),
        "GetMetricSpec": ("ScaledObjectRef", "GetMetricSpecResponse", False),
        "GetMetrics": ("GetMetricsRequest", "GetMetricsResponse", False),
    }
    expected = {
        "ScaledObjectRef": {"name": 1, "namespace": 2, "scalerMetadata": 3},
        "IsActiveResponse": {"result": 1},
        "GetMetricSpecResponse": {"metricSpecs": 1},
        "MetricSpec": {"metricName": 1, "targetSize": 2, "targetSizeFloat": 3},
        "GetMetricsRequest": {"scaledObjectRef": 1, "metricName": 2},
        "GetMetricsResponse": {"metricValues": 1},
        "MetricValue": {"metricName": 1, "metricValue": 2, "metricValueFloat": 3},
    }
    for msg, fields in expected.items():
        got = {f.name: f.number for f in fd.message_types_by_name[msg].fields}
        assert got == fields, msg
    for msg, int_field, float_field in (
        ("MetricValue", "metricValue", "metricValueFloat"),
        ("MetricSpec", "targetSize", "targetSizeFloat"),
    ):
        types = {f.name: f.type for f in fd.message_types_by_name[msg].fields}
        assert types[int_field] == FieldDescriptor.TYPE_INT64
        assert types[float_field] == FieldDescriptor.TYPE_DOUBLE
