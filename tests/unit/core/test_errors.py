"""The exception tree: every class in errors.py, drawn where it sits, with fields set by its constructor."""

import inspect
import re

import pytest

from eaglefeed.core import errors
from eaglefeed.core.errors import (
    EaglefeedError,
    FatalInferenceError,
    InferenceError,
    InputError,
    RetryableInferenceError,
)


def drawn_tree():
    """(name, parent name) of every class drawn in the module docstring."""
    parents, stack = {}, []
    for line in errors.__doc__.splitlines():
        match = re.match(r"^([│ ]*)(?:[├└]── )?([A-Z]\w+Error)\b", line)
        if not match:
            continue
        depth = len(match.group(1)) // 4 + (1 if "──" in line else 0)
        del stack[depth:]
        parents[match.group(2)] = stack[-1] if stack else None
        stack.append(match.group(2))
    return parents


def test_the_docstring_draws_every_class_under_its_base():
    classes = {name: cls for name, cls in vars(errors).items()
               if inspect.isclass(cls) and issubclass(cls, Exception)}
    drawn = drawn_tree()
    assert set(drawn) == set(classes)
    for name, parent in drawn.items():
        bases = classes[name].__bases__
        assert bases == ((Exception,) if parent is None else (classes[parent],)), name


def test_inference_errors_carry_attempts_and_retry_after_from_the_constructor():
    exc = RetryableInferenceError("http_429", "slow down", retry_after=2.5)
    assert (exc.kind, str(exc), exc.attempts, exc.retry_after) == ("http_429", "slow down", 0, 2.5)
    later = exc.after(3)
    assert type(later) is RetryableInferenceError and later.attempts == 3
    assert (later.kind, str(later), later.retry_after) == ("http_429", "slow down", 2.5)
    fatal = FatalInferenceError("http_400", "too long").after(1)
    assert isinstance(fatal, FatalInferenceError) and fatal.attempts == 1 and fatal.retry_after is None
    with pytest.raises(TypeError):
        InferenceError("k", "m", 3)  # attempts is keyword-only


def test_input_errors_carry_their_reason_code():
    exc = InputError("no_user_turn", "nothing to answer")
    assert isinstance(exc, EaglefeedError)
    assert exc.reason == "no_user_turn" and str(exc) == "nothing to answer"
