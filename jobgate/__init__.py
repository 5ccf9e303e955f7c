"""jobgate: a durable job gateway for GPU work (client, worker daemon, CLI)."""
