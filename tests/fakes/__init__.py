"""In-memory stand-ins for unit tests (integration tests use the real broker)."""
