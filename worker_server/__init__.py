"""WorkerService: the gRPC service GPU worker daemons call."""
