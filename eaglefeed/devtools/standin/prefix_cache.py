"""One server's prefix cache: an LRU of token-prefix blocks that emulates SGLang's radix cache.

Every stand-in process has its own cache, as every SGLang server has its own radix tree (and every
vLLM server its own prefix-cache blocks): a prompt sent to another server than the one that ran
its prefix finds nothing there. Like SGLang, a prompt's blocks are matched when it arrives, and a
finished sequence's prompt *and output* are cached (``cache_finished_req``), so the next turn of
a conversation, which starts with this turn's prompt and output, hits on the server that ran it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


class PrefixCache:
    """Remember token prefixes in fixed-size blocks and count how many tokens a prompt reuses.

    Block ``k`` of a sequence is keyed by a chained hash of blocks ``0..k``, so a hit on block
    ``k`` implies the whole prefix matched. At most ``len(prompt) - 1`` tokens count as cached:
    like SGLang, the last prompt token is always computed. Eviction is least-recently-used and
    leaf first: a use refreshes a path's blocks deepest first, so a block is never older than the
    blocks below it and a shared prefix (a system prompt) outlives the branches that use it.
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

    @property
    def capacity_tokens(self) -> int:
        """Tokens the cache holds at most (whole blocks)."""
        return self._capacity * self._block_size

    def match_and_insert(self, input_ids: Sequence[int]) -> int:
        """Return how many leading tokens of ``input_ids`` were cached, then cache the prompt."""
        cached = self._touch(input_ids)
        return min(cached, len(input_ids) - 1) if cached else 0

    def insert(self, token_ids: Sequence[int]) -> None:
        """Cache ``token_ids`` (a finished sequence: its prompt and the output computed)."""
        self._touch(token_ids)

    def _touch(self, ids: Sequence[int]) -> int:
        """Match ``ids`` block by block, add the blocks missing, refresh the path; return tokens matched."""
        size = self._block_size
        if not size or not self._capacity:
            return 0
        blocks = self._blocks
        key = 0
        cached = 0
        path: list[int] = []
        for start in range(0, len(ids) - size + 1, size):
            key = hash((key, tuple(ids[start : start + size])))
            path.append(key)
            if cached == start and key in blocks:
                cached = start + size
        for key in reversed(path):  # deepest first: parents end up more recent than their children
            blocks[key] = None
            blocks.move_to_end(key)
        while len(blocks) > self._capacity:
            blocks.popitem(last=False)
        return cached

    def clear(self) -> None:
        """Forget every block (``/flush_cache``)."""
        self._blocks.clear()

    def __len__(self) -> int:
        """Return the number of cached blocks."""
        return len(self._blocks)
