"""The store's FP8 codec (eaglefeed.dataset.state_files.e4m3): its table, rounding and scale layout."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from eaglefeed.dataset.state_files import e4m3

FINITE = st.floats(-1e6, 1e6, allow_nan=False, width=32)


def test_the_table_holds_every_code_of_e4m3fn() -> None:
    values = e4m3.DECODE
    assert values[0] == 0 and np.signbit(values[0x80]) and values[0x80] == 0
    assert values[1] == 2.0**-9  # the smallest subnormal
    assert values[0x08] == 2.0**-6  # the smallest normal
    assert values[0x38] == 1.0 and values[0x7E] == 448 and values[0xFE] == -448
    assert np.isnan(values[0x7F]) and np.isnan(values[0xFF])
    assert np.isfinite(np.delete(values, [0x7F, 0xFF])).all()
    assert (np.diff(values[:0x7F]) > 0).all()  # codes 0..126 ascend
    assert np.array_equal(values[0x80:0xFF], -values[:0x7F])


def test_every_finite_code_encodes_to_itself() -> None:
    codes = np.delete(np.arange(256, dtype=np.uint8), [0x7F, 0xFF])
    assert np.array_equal(e4m3.encode(e4m3.decode(codes)), codes)


def test_halfway_values_round_to_the_even_code_and_large_ones_saturate() -> None:
    assert e4m3.encode(np.float32([1.0625, 1.1875, 15.0 / 16 * 2**-6])).tolist() == [0x38, 0x3A, 0x08]
    assert e4m3.encode(np.float32([460.0, 1e9, -1e9, np.nan])).tolist() == [0x7E, 0x7E, 0xFE, 0x7F]


@given(st.lists(FINITE.filter(lambda v: abs(v) <= 448), min_size=1, max_size=200))
@settings(max_examples=300)
def test_decode_of_encode_is_within_half_a_step(values: list[float]) -> None:
    """3 mantissa bits: at most 2⁻⁴ relative for normals, half the subnormal step (2⁻¹⁰) below 2⁻⁶."""
    x = np.float32(values)
    error = np.abs(e4m3.decode(e4m3.encode(x)) - x)
    assert (error <= np.maximum(np.abs(x) * 2.0**-4, 2.0**-10)).all()


@given(hnp.arrays(np.float32, hnp.array_shapes(min_dims=3, max_dims=3, max_side=12), elements=FINITE))
@settings(max_examples=200)
def test_quantize_keeps_each_value_within_its_rows_bound(states: np.ndarray) -> None:
    codes, scales = e4m3.quantize(states)
    assert codes.shape == states.shape and codes.dtype == np.uint8
    assert scales.shape == (*states.shape[:2], 1) and scales.dtype == np.float32
    amax = np.abs(states).max(axis=-1, keepdims=True) if states.size else scales
    wanted = amax / np.float32(448)
    assert np.array_equal(scales, np.where(wanted > 0, wanted, 1).astype(np.float32))
    back = e4m3.dequantize(codes, scales)
    # relative to each value's magnitude scaled into e4m3's range: 2⁻⁴, or 2⁻¹⁰ of the scale below 2⁻⁶
    bound = np.maximum(np.abs(states) * 2.0**-4, scales * 2.0**-10) * (1 + 2.0**-20)
    assert (np.abs(back - states) <= bound).all()
    assert (np.abs(codes & 0x7F) <= 0x7E).all()  # no NaN out of finite input


def test_a_row_of_zeros_gets_scale_one_and_zero_codes() -> None:
    states = np.zeros((2, 3, 4), np.float32)
    states[1, 2] = [896, -2, 3, 4.5]
    codes, scales = e4m3.quantize(states)
    assert scales[0].ravel().tolist() == [1, 1, 1] and not codes[0].any()
    assert scales[1, 2, 0] == 2
    assert e4m3.dequantize(codes, scales)[1, 2].tolist() == [896, -2, 3, 4.5]  # each 448 × 2 or on the grid
