"""Per-sample sampling seeds: a pure function of the prompt id, the row's base seed and the sample index.

``sampling_seed = (h(prompt_id) + seed + index) mod 2**63``, with ``h`` the first 63 bits of a
blake2b digest of the prompt id. So every prompt draws from its own seed (a base seed shared by
all rows no longer gives every prompt's sample 0 the same random stream), a rerun of the same
prompt on a deterministic server (SGLang ``--enable-deterministic-inference``, vLLM) sends the
same seeds and reproduces its ids, and the sum can be undone (:func:`base_seed`) by the converse
stage, which continues sample ``i``'s lane with base ``seed + i``. The value lies in
``[0, 2**63)``: SGLang's ``sampling_seed`` takes ``[-2**63, 2**63)`` and vLLM's ``seed`` an int64.
"""

from __future__ import annotations

from hashlib import blake2b

_MOD = 1 << 63


def sample_seed(prompt_id: str, seed: int, index: int) -> int:
    """The ``sampling_seed`` of sample ``index`` of the prompt ``prompt_id`` whose base seed is ``seed``."""
    return (_offset(prompt_id) + seed + index) % _MOD


def base_seed(prompt_id: str, sampling_seed: int, index: int) -> int:
    """The base seed that :func:`sample_seed` turned into ``sampling_seed`` for sample ``index``."""
    return (sampling_seed - index - _offset(prompt_id)) % _MOD


def _offset(prompt_id: str) -> int:
    return int.from_bytes(blake2b(prompt_id.encode(), digest_size=8).digest(), "little") >> 1
