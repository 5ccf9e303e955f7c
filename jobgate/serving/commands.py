"""Placeholder: commands arrive with their issue."""

from __future__ import annotations

import argparse
from typing import Any


def add_commands(subcommands: argparse._SubParsersAction[Any]) -> None:
    """Register this module's subcommands (none yet)."""
