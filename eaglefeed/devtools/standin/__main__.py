"""``python -m eaglefeed.devtools.standin``: run the SGLang stand-in (a test/demo double)."""

import argparse
import sys

from eaglefeed.devtools.standin import add_arguments, run


def main() -> int:
    """Parse flags and serve until SIGINT/SIGTERM."""
    parser = argparse.ArgumentParser(
        prog="python -m eaglefeed.devtools.standin",
        description="SGLang stand-in server: a test/demo double of SGLang's native HTTP API.",
    )
    add_arguments(parser)
    return run(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
