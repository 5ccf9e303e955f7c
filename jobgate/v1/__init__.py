"""Generated stubs for the jobgate.v1 API (see proto/jobgate/v1)."""
