"""Deterministic per-request fault draws (the fault seed plus a request counter)."""

from __future__ import annotations

import random
from hashlib import blake2b

from eaglefeed.devtools.standin.config import FaultRates

CONTAMINATION_MAX = 5
"""SGLang's ``INIT_INCREMENTAL_DETOKENIZATION_OFFSET``: at most this many prompt ids leak."""


class FaultPlan:
    """Decide, for the i-th ``/generate`` request, which fault (if any) to inject.

    Each kind gets its own uniform draw from a generator seeded by ``blake2b(seed, i)``; kinds
    are tried in ``FAULT_KINDS`` order and the first draw under its rate wins. The same seed and
    the same request order therefore reproduce the same faults.
    """

    def __init__(self, *, rates: FaultRates) -> None:
        """Create the plan.

        Args:
            rates: per-kind probabilities and the seed.
        """
        self._rates = tuple(rates.by_kind().items())
        self._seed = rates.seed
        self._enabled = rates.enabled
        self._counter = 0

    def next_fault(self) -> str | None:
        """Count one request and return its fault kind, or None."""
        index = self._counter
        self._counter += 1
        if not self._enabled:
            return None
        return self.fault_for(index)

    def fault_for(self, index: int) -> str | None:
        """Return the fault kind of the request with this 0-based counter value."""
        rng = random.Random(_seed_for(self._seed, index))
        for kind, rate in self._rates:
            if rng.random() < rate:
                return kind
        return None


def _seed_for(seed: int, index: int) -> int:
    digest = blake2b(f"{seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def contaminate(output_ids: list[int], input_ids: list[int]) -> list[int]:
    """Prepend up to five prompt-suffix ids to ``output_ids`` (SGLang bug #10896)."""
    leak = min(CONTAMINATION_MAX, len(input_ids))
    return input_ids[len(input_ids) - leak :] + output_ids
