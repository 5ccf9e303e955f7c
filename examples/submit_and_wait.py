"""Submit a document with the Python client and print the result.

python examples/submit_and_wait.py examples/sample.txt
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from jobgate import JobClient, status_name


async def main(path: Path) -> int:
    payload = await asyncio.to_thread(path.read_bytes)
    async with JobClient() as client:  # JOBGATE_TARGET, default 127.0.0.1:50051
        job = await client.submit(
            "text-stats",
            payload,
            content_type="text/plain",
            labels={"source": path.name},
            priority="interactive",
        )
        print(f"submitted {job.id}")
        async for snapshot in client.watch(job.id, timeout=120):
            print(f"  {status_name(snapshot.status):<10} {snapshot.progress:4.0%} {snapshot.stage}")
        done = await client.get(job.id)
        print(done.result.decode() if done.result else done.error_message)
        return 0 if status_name(done.status) == "COMPLETED" else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(Path(sys.argv[1] if len(sys.argv) > 1 else "examples/sample.txt"))))
