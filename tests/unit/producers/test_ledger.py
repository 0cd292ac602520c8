"""The progress ledger: keyed by inputs and prompt settings, --restart, unwritable state dirs."""

from __future__ import annotations

import pytest

from eaglefeed.core.errors import ConfigError
from eaglefeed.producers.ledger import Ledger, run_fingerprint
from eaglefeed.producers.sources import Mark

SETTINGS = {"tokenizer": "/tok", "sampling": {"temperature": 0.6}, "samples": 1}


def fingerprint(**changes):
    args = {"inputs": ["a.jsonl"], "bootstrap_servers": "h:9092", "settings": SETTINGS, "overrides": {}}
    return run_fingerprint(**{**args, **changes})


def test_the_fingerprint_changes_with_anything_that_changes_a_prompt():
    same = fingerprint()
    assert fingerprint() == same
    changed = [fingerprint(inputs=["b.jsonl"]), fingerprint(bootstrap_servers="other:9092"),
               fingerprint(settings={**SETTINGS, "tokenizer": "/other"}),
               fingerprint(settings={**SETTINGS, "sampling": {"temperature": 0.7}}),
               fingerprint(overrides={"/a.jsonl": "[{}, {\"enable_thinking\": false}]"})]
    assert same not in changed and len(set(changed)) == len(changed)


def test_a_ledger_resumes_only_with_the_same_fingerprint_and_restart_forgets(tmp_path):
    ledger = Ledger.for_run(tmp_path, "t", "f1")
    ledger.advance(Mark("/a.jsonl", {"offset": 10, "line": 2, "inode": 1}, 10))
    ledger.commit()
    ledger.close()
    again = Ledger.for_run(tmp_path, "t", "f1")
    assert again.get("/a.jsonl") == {"offset": 10, "line": 2, "inode": 1}
    again.close()
    other = Ledger.for_run(tmp_path, "t", "f2")
    assert other.get("/a.jsonl") is None
    other.close()
    fresh = Ledger.for_run(tmp_path, "t", "f1", restart=True)
    assert fresh.get("/a.jsonl") is None and fresh.positions() == {}
    fresh.close()


def test_an_unwritable_state_dir_is_one_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")  # a folder cannot be made inside a file, even by root
    with pytest.raises(ConfigError, match="cannot keep the progress ledger in .*--state-dir"):
        Ledger.for_run(blocker / "state", "t", "f")

