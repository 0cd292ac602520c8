"""A hub id with no hub to reach fails at once, in one line, instead of 48 s of doubled retry lines."""

from __future__ import annotations

import logging
import socket
import time

import pytest

from eaglefeed.core.tokenizer import hub
from eaglefeed.core.tokenizer.remote_code import load_tokenizer


@pytest.fixture
def closed_hub(monkeypatch):
    """HF_ENDPOINT on a local port nothing listens on (every connection refused), no proxy."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "HF_HUB_OFFLINE",
                 "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    hub.hub_unreachable.cache_clear()
    yield port
    hub.hub_unreachable.cache_clear()


def test_an_unreachable_hub_is_named(closed_hub, monkeypatch):
    assert "127.0.0.1 cannot be reached" in (hub.hub_unreachable() or "")
    hub.hub_unreachable.cache_clear()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub.hub_unreachable() == "HF_HUB_OFFLINE is set"


def test_a_hub_id_not_in_the_cache_fails_at_once_without_a_hub(closed_hub, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache
    started = time.monotonic()
    with pytest.raises(OSError, match="not in the Hugging Face cache, and the hub is out of reach"):
        load_tokenizer("example-org/no-such-tokenizer", trust_remote_code=False)
    assert time.monotonic() - started < 10
    # huggingface_hub's own stderr handler is gone: its lines reach the log once, through the root's
    assert not [h for h in logging.getLogger("huggingface_hub").handlers if type(h) is logging.StreamHandler]
