"""Run ``eaglefeed`` as the previous release: it writes GenerationRecord v1 and reads only v1.

Used by the rolling-upgrade test. The data path is today's; the codecs are the ones the
previous release shipped, built from ``schemas/history/*/v1.avsc`` by ``schemas.codec_for``.

    python tests/integration/previous_release.py generate --sglang-url ... --bootstrap-servers ...
"""

from __future__ import annotations

import sys

import consumers.worker.loop as worker_loop
from eaglefeed.cli import main
from schemas import codec_for

worker_loop.GENERATION = codec_for("generation", 1)
worker_loop.PROMPT = codec_for("prompt", 1)

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
