"""Example handlers and inputs for jobgate (see docs/handlers.md)."""
