"""Fixtures of the stand-in unit tests: the demo tokenizer, loaded once."""

from __future__ import annotations

import pytest

from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.devtools.standin.vocab import Vocab, load_vocab


@pytest.fixture(scope="session")
def vocab() -> Vocab:
    """The demo tokenizer's token facts (any tokenizer dir with the chat specials works)."""
    return load_vocab(TOKENIZER_DIR)
