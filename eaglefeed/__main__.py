"""Run the eaglefeed CLI with ``python -m eaglefeed``."""

from eaglefeed.cli import main

raise SystemExit(main())
