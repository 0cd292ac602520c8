"""The command line: ``main`` builds the parser; one module per subcommand exposes ``register``."""
