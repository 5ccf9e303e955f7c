"""Plumbing shared by gateway_server and worker_server (auth, errors, settings, metrics)."""
