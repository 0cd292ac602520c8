"""Draft-vocabulary files for EAGLE-3 training, from a dataset's loss-token counts.

Both frameworks pick the draft vocabulary the same way: the ``N`` most frequent loss-token
ids (ties to the smaller id here), topped up with the smallest unused ids below ``N`` when
fewer than ``N`` ids occur, sorted ascending. Two arrays describe it:
``d2t[i] = draft_ids[i] - i`` (int64, length N: the target id of draft id ``i`` as an offset)
and ``t2d`` (bool, length V = the target model's ``vocab_size``: True for ids in the draft).

Files written (formats read from SpecForge 0.2.0 and speculators 0.9.0):
- ``specforge``: ``model.vocab_mapping_path``, ``torch.save({"d2t": int64, "t2d": bool})``
  (``load_vocab_mapping`` copies both into the draft model's buffers). Needs torch.
- ``speculators``: a folder with ``d2t-N.npy`` and ``t2d-N.npy`` (``numpy.save``), the names
  ``speculators train`` looks for in its data path with ``--draft-vocab-size N`` (or pass them
  as ``--d2t-path`` / ``--t2d-path``). Numpy only.
- ``token-freq``: speculators' ``token_freq.pt``, ``torch.save({id: count})`` of plain ints,
  from which ``speculators train`` builds the mapping itself. Needs torch.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from eaglefeed.core.errors import ConfigError, DatasetError

FORMATS = ("specforge", "speculators", "token-freq")
TORCH_HINT = "needs torch: pip install torch (from a clone: pip install -e '.[torch]')"


@dataclass(frozen=True)
class DraftVocab:
    """A draft vocabulary: ``d2t`` offsets and the ``t2d`` mask (see the module docstring)."""

    d2t: np.ndarray
    t2d: np.ndarray
    coverage: float  # share of the loss tokens whose id is in the draft vocabulary

    @property
    def draft_ids(self) -> np.ndarray:
        """The target ids of the draft vocabulary, ascending."""
        return self.d2t + np.arange(self.d2t.size, dtype=np.int64)


def draft_vocab(counts: np.ndarray, *, draft_size: int, target_size: int) -> DraftVocab:
    """Choose the draft vocabulary from dense loss-token ``counts`` (index = token id).

    Raises:
        ConfigError: the sizes are not positive, the draft is larger than the target, or
            a counted id is not below ``target_size`` (the wrong model's vocab_size).
    """
    if draft_size < 1 or target_size < draft_size:
        raise ConfigError(f"need 1 <= --draft-vocab-size ({draft_size}) <= "
                          f"--target-vocab-size ({target_size})")
    used = np.flatnonzero(counts)
    if used.size and int(used[-1]) >= target_size:
        raise ConfigError(f"token id {int(used[-1])} occurs in the dataset but --target-vocab-size is "
                          f"{target_size}: pass the target model's config.json vocab_size")
    order = used[np.lexsort((used, -counts[used]))]  # most frequent first, ties by smaller id
    chosen = order[:draft_size]
    if chosen.size < draft_size:
        spare = np.setdiff1d(np.arange(draft_size), chosen)[:draft_size - chosen.size]
        chosen = np.concatenate([chosen, spare])
    chosen = np.sort(chosen).astype(np.int64)
    t2d = np.zeros(target_size, np.bool_)
    t2d[chosen] = True
    total = int(counts.sum())
    covered = int(counts[chosen[chosen < counts.size]].sum())
    return DraftVocab(d2t=chosen - np.arange(draft_size, dtype=np.int64), t2d=t2d,
                      coverage=covered / total if total else 0.0)


def write_specforge(vocab: DraftVocab, out: Path) -> list[Path]:
    """SpecForge's ``model.vocab_mapping_path`` file.

    Raises:
        ConfigError: torch is not installed.
    """
    torch = _torch("--format specforge")
    with _atomic(out) as fh:
        torch.save({"d2t": torch.from_numpy(vocab.d2t.copy()), "t2d": torch.from_numpy(vocab.t2d.copy())}, fh)
    return [out]


def write_speculators(vocab: DraftVocab, out: Path) -> list[Path]:
    """``d2t-N.npy`` and ``t2d-N.npy`` in the folder ``out`` (created if needed).

    Raises:
        ConfigError: ``out`` is an existing file.
    """
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--format speculators writes d2t-N.npy and t2d-N.npy into a folder; "
                          f"{out} is a file")
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, array in (("d2t", vocab.d2t), ("t2d", vocab.t2d)):
        path = out / f"{name}-{vocab.d2t.size}.npy"
        with _atomic(path) as fh:
            np.save(fh, array)
        paths.append(path)
    return paths


def write_token_freq(ids: np.ndarray, counts: np.ndarray, out: Path) -> list[Path]:
    """The ``token_freq.pt`` of speculators: ``{token id: count}`` of plain ints.

    Raises:
        ConfigError: torch is not installed.
    """
    torch = _torch("--format token-freq")
    with _atomic(out) as fh:
        torch.save({int(i): int(c) for i, c in zip(ids.tolist(), counts.tolist(), strict=True)}, fh)
    return [out]


def _torch(what: str) -> Any:
    try:
        import torch  # type: ignore[import-not-found]
    except ImportError as exc:
        raise ConfigError(f"vocab-map {what} writes a torch file and {TORCH_HINT}") from exc
    return torch


@contextmanager
def _atomic(path: Path) -> Iterator[IO[bytes]]:
    """Write ``path`` through a temp file: fsync, then rename (a reader never sees half a file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise DatasetError(f"cannot write {path}: {exc}") from exc
    finally:
        tmp.unlink(missing_ok=True)
