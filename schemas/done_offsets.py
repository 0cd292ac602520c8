"""The done offsets of a generate commit: offsets finished above its watermark, in its metadata.

Kept apart from the worker's offset tracker (``eaglefeed.consumers.generate.offsets``), which
writes them, so ``eaglefeed status`` can read them without loading the worker: the committed
offset alone is only the contiguous finished prefix, while work finishes out of order.
"""

from __future__ import annotations

import base64
import binascii
import zlib
from collections.abc import Collection

# Encode the offsets finished above a commit watermark into Kafka's commit metadata string.
#
# Work finishes out of order, so at commit time some offsets above the watermark are already
# done (their results are durable). Listing them in the metadata of the offset commit lets the
# next owner of the partition (after a crash or a rebalance) skip them instead of generating
# them again. Format: ``ef1:`` + base64(zlib(bitset)), bit ``i`` set when ``watermark + 1 + i``
# is done (the watermark itself is never done, or it would have moved). A set that does not fit
# the broker's limit is cut to its lowest offsets: less to skip means more re-done work, never
# lost work.

PREFIX = "ef1:"
MAX_CHARS = 3000
"""Well under the broker's default ``offset.metadata.max.bytes`` (4096)."""


def encode_done(watermark: int, done: Collection[int], *, max_chars: int = MAX_CHARS) -> str:
    """Return the metadata string for ``done`` offsets above ``watermark`` ('' when none).

    Args:
        watermark: the committed offset (next to read); offsets ``<= watermark`` are ignored.
        done: finished offsets.
        max_chars: the longest string to return; larger sets keep only their lowest offsets.
    """
    above = sorted(o for o in done if o > watermark)
    while above:
        text = _pack(watermark, above)
        if len(text) <= max_chars:
            return text
        above = above[: len(above) // 2]
    return ""


def decode_done(watermark: int, metadata: str | None) -> set[int]:
    """Return the done offsets that ``metadata`` lists above ``watermark`` (empty if unknown)."""
    if not metadata or not metadata.startswith(PREFIX):
        return set()
    try:
        bits = zlib.decompress(base64.b64decode(metadata[len(PREFIX):], validate=True))
    except (binascii.Error, zlib.error, ValueError):
        return set()
    base = watermark + 1
    return {base + i * 8 + b for i, byte in enumerate(bits) if byte for b in range(8) if byte >> b & 1}


def _pack(watermark: int, above: list[int]) -> str:
    span = above[-1] - watermark
    bits = bytearray((span + 7) // 8)
    for offset in above:
        i = offset - watermark - 1
        bits[i >> 3] |= 1 << (i & 7)
    return PREFIX + base64.b64encode(zlib.compress(bytes(bits), 9)).decode("ascii")
