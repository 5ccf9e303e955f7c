"""The project benchmark harness."""
