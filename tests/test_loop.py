"""Every jobgate process runs its event loop on uvloop."""

from __future__ import annotations

import asyncio

from jobgate import _loop


def test_run_uses_uvloop_and_returns_the_result() -> None:
    async def main() -> str:
        return type(asyncio.get_running_loop()).__module__

    assert _loop.run(main()).startswith("uvloop")
