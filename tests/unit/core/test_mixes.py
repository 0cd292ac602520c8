"""The sampling-mix cycles: their two syntaxes, one clear line per mistake, and a draw that is a pure
function of the row's identity whose shares follow the weights."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from eaglefeed.core.errors import ConfigError
from eaglefeed.core.mixes import (
    MAX_WEIGHT,
    SamplingMix,
    parse_temperature_cycle,
    parse_template_kwargs_cycle,
)

EFFORT = parse_template_kwargs_cycle("reasoning_effort=low:4,medium:4,high:2")


def test_temperature_cycles_with_and_without_weights():
    assert parse_temperature_cycle("0,0.6,1.0") == ((0.0, 1), (0.6, 1), (1.0, 1))
    assert parse_temperature_cycle(" 0:2 , 1.5:1") == ((0.0, 2), (1.5, 1))
    assert all(type(t) is float for t, _ in parse_temperature_cycle("0,1"))  # as the records carry them


def test_template_kwargs_cycles_in_the_short_form_and_the_json_form():
    assert EFFORT == (({"reasoning_effort": "low"}, 4), ({"reasoning_effort": "medium"}, 4),
                      ({"reasoning_effort": "high"}, 2))
    # true/false/null and numbers read as JSON, so enable_thinking gets booleans, not strings
    assert parse_template_kwargs_cycle("enable_thinking=true,false") == (
        ({"enable_thinking": True}, 1), ({"enable_thinking": False}, 1))
    assert parse_template_kwargs_cycle('[{}, [{"enable_thinking": false, "x": "a,b:c"}, 3]]') == (
        ({}, 1), ({"enable_thinking": False, "x": "a,b:c"}, 3))


@pytest.mark.parametrize("text, why", [
    ("", "entry 1 is empty"), ("0,,1", "entry 2 is empty"), ("warm", "entry 1 ('warm') is not a number"),
    ("-0.5", "finite number >= 0"), ("nan", "finite number >= 0"), ("1e999", "finite number >= 0"),
    ("0.6:0", "weight after ':' must be an integer"), ("0.6:²", "weight after ':' must be an integer"),
    (f"1:{MAX_WEIGHT + 1}", "weight after ':'"), ("0,0.0", "0.0 is listed twice: give it a weight"),
])
def test_a_bad_temperature_cycle_is_one_line_naming_the_flag(text, why):
    with pytest.raises(ConfigError) as caught:
        parse_temperature_cycle(text)
    message = str(caught.value)
    assert message.startswith(f"--temperature-cycle {text!r}: ") and why in message and "\n" not in message


@pytest.mark.parametrize("text, why", [
    ("low,medium", "expected KEY=VALUE[:WEIGHT]"), ("=low", "expected KEY=VALUE"),
    ('{"reasoning_effort": "low"}', "a cycle of them is a JSON list"),
    ('{"a": 1};{"a": 2}', "a cycle of them is a JSON list"),
    ("effort=", "entry 1 is empty"), ("effort=a:b", "use the JSON list form"),
    ("effort=low,low", '{"effort": "low"} is listed twice'), ("[]", "non-empty list of objects"),
    ("[1]", "entry 1 must be an object"), ('[[{"a": 1}, 0]]', "entry 1's weight"),
    ('[[{"a": 1}, true]]', "entry 1's weight"), ("[{", "not a JSON list"),
])
def test_a_bad_template_kwargs_cycle_is_one_line_naming_the_flag(text, why):
    with pytest.raises(ConfigError) as caught:
        parse_template_kwargs_cycle(text)
    message = str(caught.value)
    assert message.startswith("--template-kwargs-cycle ") and why in message and "\n" not in message


temperatures = st.lists(st.tuples(st.floats(0, 100, allow_nan=False), st.integers(1, MAX_WEIGHT)),
                        min_size=1, max_size=8, unique_by=lambda e: e[0])
scalars = st.one_of(st.booleans(), st.none(), st.integers(-10**6, 10**6),
                    st.text(st.characters(blacklist_characters=",:", blacklist_categories=("Cs", "Z", "Cc")),
                            min_size=1).filter(lambda s: s == s.strip()))
nested = st.one_of(scalars, st.lists(st.integers()), st.dictionaries(st.text(), st.integers()))
objects = st.dictionaries(st.text(min_size=1), nested, max_size=3)


@settings(max_examples=200, deadline=None)
@given(temperatures)
def test_a_written_temperature_cycle_reads_back_as_written(entries):
    text = ",".join(f"{t!r}:{w}" if w > 1 else repr(t) for t, w in entries)
    assert parse_temperature_cycle(text) == tuple(entries)


@settings(max_examples=200, deadline=None)
@given(st.lists(scalars, min_size=1, max_size=6, unique_by=json.dumps), st.integers(1, 9))
def test_a_short_form_cycle_reads_back_its_values(values, weight):
    # a string that reads as JSON (say "1" or "true") is that JSON value: what the short form means
    assume(not any(isinstance(v, str) and _reads_as_json(v) for v in values))
    text = "key=" + ",".join(f"{_short(v)}:{weight}" for v in values)
    assert parse_template_kwargs_cycle(text) == tuple(({"key": v}, weight) for v in values)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(objects, st.integers(1, 5)), min_size=1, max_size=5,
                unique_by=lambda e: json.dumps(e[0], sort_keys=True)))
def test_a_json_cycle_reads_back_its_objects_and_weights(entries):
    text = json.dumps([kw if w == 1 else [kw, w] for kw, w in entries])
    assert parse_template_kwargs_cycle(text) == tuple(entries)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_any_text_either_parses_or_is_one_config_error(text):
    for parse in (parse_temperature_cycle, parse_template_kwargs_cycle):
        try:
            parse(text)
        except ConfigError as exc:
            assert "\n" not in str(exc)


def test_the_draw_is_a_pure_function_of_the_identity_and_follows_the_weights():
    mix = SamplingMix(temperatures=parse_temperature_cycle("0,0.6,1.0"), template_kwargs=EFFORT)
    draws = [mix.draw(f"row {i}") for i in range(6000)]
    assert draws == [mix.draw(f"row {i}") for i in range(6000)]  # a rerun (or another process) draws the same
    temps = Counter(t for t, _ in draws)
    efforts = Counter(k for _, k in draws)
    assert set(temps) == {0, 1, 2} and set(efforts) == {0, 1, 2}
    assert all(abs(temps[i] / 6000 - 1 / 3) < 0.03 for i in range(3))
    assert all(abs(efforts[i] / 6000 - share) < 0.03 for i, share in enumerate([0.4, 0.4, 0.2]))
    # the two cycles draw independently: every pair appears near its product share
    pairs = Counter(draws)
    assert all(abs(pairs[t, k] / 6000 - [0.4, 0.4, 0.2][k] / 3) < 0.025 for t in range(3) for k in range(3))


def test_without_a_cycle_nothing_is_drawn_or_keyed():
    mix = SamplingMix()
    assert not mix.active and mix.draw("x") == (None, None) and mix.describe() == ""
    only = SamplingMix(temperatures=((0.5, 1),))
    assert only.active and only.draw("x") == (0, None)
    assert only.as_key() == {"temperature_cycle": [[0.5, 1]], "template_kwargs_cycle": []}
    assert "temperature 0.5:1" in only.describe()


def _short(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _reads_as_json(text: str) -> bool:
    try:
        value = json.loads(text)
    except ValueError:
        return False
    return value is None or isinstance(value, (bool, int)) or (
        isinstance(value, float) and math.isfinite(value))
