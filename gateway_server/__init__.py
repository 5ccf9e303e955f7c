"""JobService: the gRPC gateway internal services call."""
