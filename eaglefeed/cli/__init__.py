"""One module per ``eaglefeed`` subcommand, each exposing ``register(subparsers)``."""
