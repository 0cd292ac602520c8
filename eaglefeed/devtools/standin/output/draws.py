"""Seeded uniform draws from a blake2b counter stream (far cheaper to set up than ``Random``)."""

from __future__ import annotations

import math
import struct
from hashlib import blake2b

_UNPACK = struct.Struct("<8Q").unpack
_SCALE = 2.0**-53


class Draws:
    """A deterministic stream of uniforms in [0, 1) derived from a key.

    Block ``b`` of the stream is ``blake2b(key || b, digest_size=64)``, read as eight 64-bit
    words, each turned into a 53-bit float. A response needs about ten draws, so one hash
    usually suffices, where ``random.Random(seed)`` first fills a 2.5 KB state.
    """

    __slots__ = ("_key", "_block", "_values", "_next")

    def __init__(self, key: bytes) -> None:
        """Start the stream of ``key``."""
        self._key = key
        self._block = 0
        self._values: tuple[int, ...] = ()
        self._next = 0

    def random(self) -> float:
        """Return the next uniform in [0, 1)."""
        if self._next >= len(self._values):
            block = self._block.to_bytes(8, "little")
            self._values = _UNPACK(blake2b(self._key + block, digest_size=64).digest())
            self._block += 1
            self._next = 0
        value = self._values[self._next]
        self._next += 1
        return (value >> 11) * _SCALE

    def uniform(self, low: float, high: float) -> float:
        """Return a uniform in [low, high)."""
        return low + (high - low) * self.random()

    def randrange(self, stop: int) -> int:
        """Return an integer in [0, stop)."""
        return min(int(self.random() * stop), stop - 1)

    def lognormvariate(self, mu: float, sigma: float) -> float:
        """Return a lognormal draw (Box-Muller on two uniforms)."""
        radius = math.sqrt(-2.0 * math.log(1.0 - self.random()))
        normal = radius * math.cos(2.0 * math.pi * self.random())
        return math.exp(mu + sigma * normal)
