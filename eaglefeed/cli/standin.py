"""``eaglefeed stub-sglang``: the SGLang stand-in (a test and demo double)."""

from __future__ import annotations

import argparse

from eaglefeed.cli._common import add_command


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the command to ``sub``."""
    from eaglefeed.devtools import standin

    p = add_command(sub, "stub-sglang", "run the SGLang stand-in (a test and demo double of SGLang's "
                                     "native HTTP API; no GPU, no model)")
    standin.add_arguments(p)
    p.set_defaults(run=standin.run)
