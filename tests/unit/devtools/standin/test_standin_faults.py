"""Deterministic fault draws and the contamination bug."""

from collections import Counter

from eaglefeed.devtools.standin.config import FaultRates
from eaglefeed.devtools.standin.faults import FaultPlan, contaminate


def draws(rates: FaultRates, count: int) -> list:
    plan = FaultPlan(rates=rates)
    return [plan.next_fault() for _ in range(count)]


def test_no_faults_by_default():
    assert set(draws(FaultRates(), 50)) == {None}


def test_rate_one_always_hits_that_kind():
    for field, kind in [
        ("http_503", "503"),
        ("http_500", "500"),
        ("reset", "reset"),
        ("hang", "hang"),
        ("abort", "abort"),
        ("contaminate", "contaminate"),
    ]:
        assert set(draws(FaultRates(**{field: 1.0}), 20)) == {kind}


def test_same_seed_same_sequence_other_seed_other_sequence():
    rates = FaultRates(http_503=0.2, reset=0.2, abort=0.2, seed=7)
    first = draws(rates, 200)
    assert first == draws(rates, 200)
    assert first != draws(FaultRates(http_503=0.2, reset=0.2, abort=0.2, seed=8), 200)
    counts = Counter(first)
    assert 20 < counts["503"] < 60 and counts[None] > 50


def test_contaminate_prepends_at_most_five_prompt_ids():
    assert contaminate([9, 9], [1, 2, 3, 4, 5, 6, 7]) == [3, 4, 5, 6, 7, 9, 9]
    assert contaminate([9], [1, 2]) == [1, 2, 9]


def test_rates_are_validated():
    import pytest

    with pytest.raises(ValueError):
        FaultRates(http_500=1.5)
