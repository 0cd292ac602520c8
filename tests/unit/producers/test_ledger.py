"""The progress ledger: keyed by inputs and prompt settings, --restart, unwritable state dirs."""

from __future__ import annotations

import pytest

from eaglefeed.core.config import KafkaConfig, ProducerConfig, PromptSettings, SamplingDefaults
from eaglefeed.core.errors import ConfigError
from eaglefeed.producers.ledger import Ledger, open_ledger, run_fingerprint
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



@pytest.mark.parametrize(("prompts", "name"), [
    ({}, "t.f9cc5ac2a59afd5a.ledger.json"),
    ({"turns": "all"}, "t.a0e2b9f67f937d03.ledger.json"),
    ({"history": "rerender", "max_turns": 4, "samples": 3, "max_prompt_tokens": 100,
      "sampling": SamplingDefaults(top_k=5, stop_token_ids=(7,)),
      "chat_template_kwargs": {"enable_thinking": False}}, "t.b528565e648256b4.ledger.json"),
])
def test_the_ledger_of_the_same_run_keeps_its_name(prompts, name, tmp_path):
    """A ledger on disk is found again only under the same name: these names must never change."""
    cfg = ProducerConfig(kafka=KafkaConfig(topic_prefix="t"), inputs=("/nonexistent/in.jsonl",),
                         prompts=PromptSettings(tokenizer="tok", **prompts), follow=True, state_dir=tmp_path)
    ledger = open_ledger(cfg, files=[])
    assert ledger is not None and ledger.path.name == name
    ledger.close()
