"""An LRU of prompt-prefix blocks that emulates SGLang's radix cache for ``cached_tokens``."""

from __future__ import annotations

from collections import OrderedDict


class PrefixCache:
    """Remember prompt prefixes in fixed-size blocks and count how many tokens a prompt reuses.

    Block ``k`` of a prompt is keyed by a chained hash of blocks ``0..k``, so a hit on block
    ``k`` implies the whole prefix matched. At most ``len(prompt) - 1`` tokens count as cached:
    like SGLang, the last prompt token is always computed.
    """

    def __init__(self, *, block_size: int, capacity_tokens: int) -> None:
        """Create an empty cache.

        Args:
            block_size: tokens per block; 0 disables the cache.
            capacity_tokens: how many tokens the cache holds before evicting the least recent.
        """
        self._block_size = block_size
        self._capacity = capacity_tokens // block_size if block_size else 0
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def match_and_insert(self, input_ids: list[int]) -> int:
        """Return how many leading tokens of ``input_ids`` were cached, then cache the prompt."""
        size = self._block_size
        if not size or not self._capacity:
            return 0
        blocks = self._blocks
        key = 0
        cached = 0
        missed = False
        for start in range(0, len(input_ids) - size + 1, size):
            key = hash((key, tuple(input_ids[start : start + size])))
            if not missed and key in blocks:
                blocks.move_to_end(key)
                cached = start + size
                continue
            missed = True
            blocks[key] = None
        while len(blocks) > self._capacity:
            blocks.popitem(last=False)
        return min(cached, len(input_ids) - 1)

    def clear(self) -> None:
        """Forget every block (``/flush_cache``)."""
        self._blocks.clear()

    def __len__(self) -> int:
        """Return the number of cached blocks."""
        return len(self._blocks)
