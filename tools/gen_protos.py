"""Generate the Python stubs under jobgate/v1 from proto/.

Usage: python tools/gen_protos.py [OUTPUT_ROOT]

Writes *_pb2.py, *_pb2_grpc.py, *_pb2.pyi and *_pb2_grpc.pyi next to the
package (or under OUTPUT_ROOT, which the freshness test uses to diff).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"


def generate(out: Path) -> None:
    # protoc finds the mypy-protobuf plugins on PATH; they sit beside this interpreter.
    bindir = str(Path(sys.executable).parent)
    os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    protos = sorted(str(p.relative_to(PROTO_DIR)) for p in PROTO_DIR.rglob("*.proto"))
    include = str(Path(protoc.__file__).parent / "_proto")
    args = [
        "protoc",
        f"-I{PROTO_DIR}",
        f"-I{include}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        f"--mypy_out={out}",
        f"--mypy_grpc_out={out}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT)
