"""Render the fault suite's figures (`--faults-figures PATH`) as docs/reliability.md's table.

`python -m tests.faults.report PATH` prints the markdown table to stdout.
"""

from __future__ import annotations

import json
import sys
from typing import Any

HEADER = (
    "| scenario | jobs | faults injected | lost | doubled | recovery p99 | other figures |\n"
    "| --- | ---: | ---: | ---: | ---: | ---: | --- |"
)


def _notes(notes: dict[str, Any]) -> str:
    return ", ".join(f"{key}: {value}" for key, value in notes.items()) or ""


def table(document: dict[str, Any]) -> str:
    rows = [HEADER]
    for figure in document["scenarios"]:
        recovery = f"{figure['recovery_p99']:.2f} s" if figure["recovery_p99"] else "n/a"
        rows.append(
            f"| {figure['scenario']} | {figure['jobs']} | {figure['faults']} | {figure['lost']} "
            f"| {figure['doubled']} | {recovery} | {_notes(figure['notes'])} |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    with open(sys.argv[1]) as source:
        document = json.load(source)
    print(f"({document['mode']} mode)\n")
    print(table(document))
