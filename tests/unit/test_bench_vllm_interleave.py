"""bench/vllm_pipeline_vs_direct.py: passes interleaved ABBA, the ratio by the means of each side's passes."""

import pytest

from bench.vllm_pipeline_vs_direct import passes, ratios


def test_the_passes_alternate_which_side_goes_first():
    assert passes(1) == ["direct", "pipeline"]
    assert passes(2) == ["direct", "pipeline", "pipeline", "direct"]
    assert passes(3).count("direct") == passes(3).count("pipeline") == 3


def test_a_drift_over_the_passes_weighs_on_both_sides_alike():
    # vLLM slows by 10 rows/s per pass, the pipeline as fast as the direct script: ABBA cancels it
    steady = [150.0, 140.0, 130.0, 120.0]
    order = passes(2)
    names = ["direct_1", "pipeline_1", "pipeline_2", "direct_2"]
    sides = {n: {"steady_rows_per_s": v, "overall_rows_per_s": v - 10,
                 "first_row_s": 2.0 if n.startswith("direct") else 3.0}
             for n, v in zip(names, steady, strict=True)}
    out = ratios(sides, order)
    assert out["steady_ratio"] == 1.0
    assert out["steady_means"] == {"direct": 135.0, "pipeline": 135.0}
    assert out["steady_round_ratios"] == [pytest.approx(140 / 150, abs=1e-3),
                                          pytest.approx(130 / 120, abs=1e-3)]
    assert out["first_row_s"] == {"direct": [2.0, 2.0], "pipeline": [3.0, 3.0]}
