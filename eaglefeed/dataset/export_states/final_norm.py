"""The target model's final RMSNorm, read from its folder and applied to stored states (``FinalNorm``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from eaglefeed.core.errors import ConfigError
from eaglefeed.dataset.hidden_states import HiddenStatesError, read_header, to_bfloat16, to_float32

NORM_KEYS = ("model.norm.weight", "model.language_model.norm.weight", "language_model.model.norm.weight")
"""Where a transformers checkpoint keeps the final norm's weight (Llama, Qwen, Mistral and kin)."""


@dataclass(frozen=True)
class FinalNorm:
    """The target model's final RMSNorm (as transformers' Llama applies it), for SpecForge's ``hidden_state``.

    ``x / sqrt(mean(x²) + eps)`` in float32, cast to the stored dtype, times the weight (rounded to
    the stored dtype again): the steps of ``LlamaRMSNorm`` (Qwen, Mistral alike).
    """

    weight: np.ndarray  # float32 [H]
    eps: float

    @classmethod
    def from_model(cls, model: Path) -> FinalNorm:
        """Read ``rms_norm_eps`` from ``config.json`` and the norm weight from the safetensors files.

        Raises:
            ConfigError: no config, no norm weight, or a model whose norm is not plain RMSNorm.
        """
        model = Path(model)
        try:
            config = json.loads((model / "config.json").read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"--final-norm {model}: no readable config.json ({exc})") from exc
        text = config.get("text_config") or {}
        kind = str(config.get("model_type", ""))
        if kind.startswith("gemma"):
            raise ConfigError(f"--final-norm: {kind}'s norm scales by 1 + weight; not supported")
        eps = config.get("rms_norm_eps", text.get("rms_norm_eps"))
        if eps is None:
            raise ConfigError(f"--final-norm {model}: config.json has no rms_norm_eps (not RMSNorm?)")
        for path in sorted(model.glob("*.safetensors")):
            try:
                header = read_header(path)
            except HiddenStatesError as exc:
                raise ConfigError(f"--final-norm {model}: {exc}") from exc
            for key in NORM_KEYS:
                if key in header.tensors:
                    code, shape, begin, end = header.tensors[key]
                    return cls(weight=_read_vector(path, header.data_start + begin, end - begin, code, shape),
                               eps=float(eps))
        raise ConfigError(f"--final-norm {model}: no {' / '.join(NORM_KEYS)} in its safetensors files")

    def apply(self, states: np.ndarray, dtype: str) -> np.ndarray:
        """``states`` ``[T, H]`` (stored dtype; bf16 as uint16) normalized, in the stored dtype."""
        x = to_float32(states, dtype)
        y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True, dtype=np.float32) + np.float32(self.eps))
        y = to_float32(_narrow(y, dtype), dtype)
        return _narrow(y * self.weight, dtype)


def _read_vector(path: Path, offset: int, size: int, code: str, shape: tuple[int, ...]) -> np.ndarray:
    numpy = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}
    if code not in numpy or len(shape) != 1:
        raise ConfigError(f"{path.name}: a norm weight of dtype {code} and shape {list(shape)}")
    with open(path, "rb") as fh:
        fh.seek(offset)
        raw = np.frombuffer(fh.read(size), numpy[code])
    return to_float32(raw, "bfloat16" if code == "BF16" else "float32")


def _narrow(values: np.ndarray, dtype: str) -> np.ndarray:
    """float32 → the stored dtype (bf16 rounded to nearest even, as uint16 bits)."""
    if dtype == "bfloat16":
        return to_bfloat16(values)
    return values.astype(np.float16 if dtype == "float16" else np.float32)
