"""What ``generate --hidden-states`` asks of a capture-enabled server: layers, dtype, where the files land."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eaglefeed.core.errors import ConfigError

CAPTURE_DTYPES = ("bfloat16", "float32", "float16", "float8_e4m3fn")
DEFAULT_WAIT_SECONDS = 60.0
"""How long the worker waits for a file after its response (vLLM answers before the file is written)."""


@dataclass(frozen=True)
class CaptureSettings:
    """Hidden-state capture in the generation pass (``eaglefeed generate --hidden-states``).

    Attributes:
        store: the folder the server writes into, as this worker sees it (the dataset's
            ``hidden_states/``); the server's ``shared_storage_path`` must be the same folder.
        layers: the vLLM layer ids asked for, any order; None: the model's default,
            ``[2, N//2, N-3]`` (:func:`default_layers`), N read from the server's first file.
        with_last: with the default layers, also layer N (the last layer's output).
        dtype: the stored dtype the run expects; None: whatever the server stores.
        wait_seconds: how long a file may take to appear after its response.
        upload: the dataset's ``s3://bucket/prefix`` when its ``hidden_states/`` lives in an
            object store: ``store`` is then a local spool the server writes into (or the worker,
            for SGLang), and each checked file is uploaded to ``<upload>/hidden_states/`` and
            deleted from the spool.
        budget_bytes: ``--hidden-states-budget``: past this many bytes stored in the store and not
            yet consumed by every trainer group, the worker fetches no prompts (None: no bound).
    """

    store: Path
    layers: tuple[int, ...] | None = None
    with_last: bool = False
    dtype: str | None = None
    wait_seconds: float = DEFAULT_WAIT_SECONDS
    upload: str | None = None
    budget_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.budget_bytes is not None and self.budget_bytes < 1:
            raise ConfigError(f"--hidden-states-budget must be a positive size, not {self.budget_bytes}")
        if self.layers is not None and (not self.layers or len(set(self.layers)) != len(self.layers)
                                        or min(self.layers) < 0):
            raise ConfigError(f"--hidden-states: layer ids must be distinct and from 0, "
                              f"not {list(self.layers)}")
        if self.dtype is not None and self.dtype not in CAPTURE_DTYPES:
            raise ConfigError(f"--hidden-states-dtype must be one of {', '.join(CAPTURE_DTYPES)}, "
                              f"not {self.dtype!r}")
        if not self.wait_seconds > 0:
            raise ConfigError(f"--hidden-states-wait must be above 0 seconds, not {self.wait_seconds}")

    def expected_layers(self, num_hidden_layers: int) -> tuple[int, ...]:
        """The layers a model of ``num_hidden_layers`` must capture for this run, ascending."""
        if self.layers is not None:
            return tuple(sorted(self.layers))
        return default_layers(num_hidden_layers, with_last=self.with_last)


def default_layers(num_hidden_layers: int, *, with_last: bool = False) -> tuple[int, ...]:
    """EAGLE-3's default aux layers as vLLM ids: ``[2, N//2, N-3]`` (speculators 0.9), plus N if asked."""
    n = num_hidden_layers
    layers = sorted({min(2, n), n // 2, max(n - 3, 0)})
    return tuple(layers + [n] if with_last and n not in layers else layers)


def parse_layers(text: str) -> tuple[tuple[int, ...] | None, bool]:
    """``--hidden-states`` as (layers, with_last): ``auto``, ``auto+last`` or ids such as ``2,16,29,32``.

    Raises:
        ConfigError: neither a keyword nor a comma-separated list of ids.
    """
    value = text.strip().lower()
    if value in ("auto", ""):
        return None, False
    if value == "auto+last":
        return None, True
    try:
        return tuple(int(part) for part in value.split(",") if part.strip()), False
    except ValueError:
        raise ConfigError(f"--hidden-states takes auto, auto+last or layer ids such as 2,16,29,32, "
                          f"not {text!r}") from None


_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12,
          "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}


def parse_bytes(text: str) -> int:
    """A size such as ``500000000``, ``200G``, ``1.5TB`` or ``64GiB`` in bytes (k, M, G, T: powers of 1000).

    Raises:
        ConfigError: not a number with an optional unit.
    """
    value = text.strip().lower().removesuffix("b")
    number = value.rstrip("kmgti")
    unit = value[len(number):]
    try:
        if unit not in _UNITS:
            raise ValueError(unit)
        return int(float(number) * _UNITS[unit])
    except ValueError:
        raise ConfigError(f"a size in bytes such as 500000000, 200G or 64GiB, not {text!r}") from None
