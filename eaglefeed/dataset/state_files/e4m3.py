"""FP8 e4m3 (``float8_e4m3fn``) with one scale per token and layer: the store's numpy codec.

A ``[T, L, H]`` block is stored as e4m3 codes (one byte each) and a ``[T, L, 1]`` float32 scale:
``scale = max |x| over H / 448`` (448 is e4m3's largest finite value), ``code = e4m3(x / scale)``
rounded to nearest even, and ``x ≈ value(code) × scale``. Each row of H values thus uses e4m3's
whole range, and a value keeps 3 mantissa bits: a relative error of at most 2⁻⁴ (half a step),
or 2⁻¹⁰ of the row's scale below e4m3's smallest normal (2⁻⁶). The capture connector quantizes
the same way with torch (``torch.float8_e4m3fn``), bit for bit; numpy has no fp8 type, so the
codes are decoded through a 256-entry table, which is exact.
"""

from __future__ import annotations

import numpy as np

MAX = 448.0
"""e4m3fn's largest finite value (exponent 15, mantissa 6: 1.75 × 2⁸)."""
NAN_CODE = 0x7F
"""The code of NaN (e4m3fn has no infinities; 0x7F and 0xFF are NaN)."""


def _table() -> np.ndarray:
    codes = np.arange(256)
    exponent = (codes >> 3) & 0xF
    mantissa = (codes & 0x7).astype(np.float64)
    magnitude = np.where(exponent == 0, mantissa / 8 * 2.0**-6, (1 + mantissa / 8) * 2.0 ** (exponent - 7))
    values = np.where(codes & 0x80, -magnitude, magnitude)
    values[(codes & 0x7F) == NAN_CODE] = np.nan
    return values.astype(np.float32)


DECODE = _table()
"""Code → float32 value, for all 256 codes (exact: e4m3 values are float32 values)."""
_POSITIVE = DECODE[:NAN_CODE]  # codes 0..126, ascending from 0 to 448
_MIDPOINTS = (_POSITIVE[:-1] + _POSITIVE[1:]) / np.float32(2)  # exact in float32 (one more bit)


def encode(values: np.ndarray) -> np.ndarray:
    """float32 values → e4m3 codes (uint8), rounded to nearest even; magnitudes above 448 saturate.

    NaN gives :data:`NAN_CODE`.
    """
    x = np.asarray(values, np.float32)
    a = np.abs(x)
    below: np.ndarray = np.searchsorted(_MIDPOINTS, a, side="left")  # midpoints under a: the nearest code
    tie = np.searchsorted(_MIDPOINTS, a, side="right") > below  # a is a midpoint: take the even code
    code = (below + (tie & (below & 1).astype(bool))).astype(np.uint8)
    code = np.where(np.isnan(x), np.uint8(NAN_CODE), code)
    signed: np.ndarray = np.where(np.signbit(x), code | np.uint8(0x80), code)
    return signed.astype(np.uint8)


def decode(codes: np.ndarray) -> np.ndarray:
    """e4m3 codes (uint8) → float32 values, exactly."""
    return np.take(DECODE, np.asarray(codes, np.uint8))


def quantize(states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``[..., H]`` float values → (codes ``[..., H]`` uint8, scales ``[..., 1]`` float32).

    One scale per row of the last axis (per token and layer for ``[T, L, H]``); a row of zeros
    (or of values whose scale would underflow float32) gets scale 1 and codes 0.
    """
    x = np.asarray(states, np.float32)
    amax = np.max(np.abs(x), axis=-1, keepdims=True) if x.size else np.zeros((*x.shape[:-1], 1), np.float32)
    scales = amax / np.float32(MAX)
    scales = np.where(scales > 0, scales, np.float32(1)).astype(np.float32)  # 0 below 448 × 2⁻¹⁴⁹ too
    return encode(x / scales), scales


def dequantize(codes: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """Codes ``[..., H]`` and their scales ``[..., 1]`` → float32 ``[..., H]``."""
    return decode(codes) * np.asarray(scales, np.float32)
