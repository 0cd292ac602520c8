"""Run the eaglefeed CLI with ``python -m eaglefeed``."""

from eaglefeed.cli.main import main

raise SystemExit(main())
