"""One topic prefix, one tokenizer: ``produce`` refuses prompts of another tokenizer or chat template
into a prefix that holds prompts already, naming both, unless given ``--allow-mixed``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from eaglefeed.core.config import KafkaConfig
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.schemas import PROMPT
from tests.cli import kafka_flags, run_cli
from tests.integration.worker_support import read_topic

pytestmark = pytest.mark.kafka


def other_template(folder: Path) -> Path:
    """The demo tokenizer with one more line in its chat template (same vocabulary, same files hash)."""
    shutil.copytree(TOKENIZER_DIR, folder)
    template = folder / "chat_template.jinja"
    template.write_text("{#- a copy with another template -#}\n" + template.read_text())
    return folder


def other_tokenizer(folder: Path) -> Path:
    """The demo tokenizer with an extra special token listed in its config (another files hash)."""
    shutil.copytree(TOKENIZER_DIR, folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["additional_special_tokens"] = [*config.get("additional_special_tokens", []), "<|eot_id|>"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def produce(kafka: KafkaConfig, inputs: Path, tokenizer: Path, *flags: str):
    return run_cli("produce", str(inputs), *kafka_flags(kafka), "--tokenizer", str(tokenizer),
                   "--workers", "0", "--partitions", "2", "--restart", *flags)


def test_a_second_tokenizers_prompts_are_refused_naming_both(kafka_config: KafkaConfig, tmp_path: Path):
    inputs = tmp_path / "prompts.jsonl"
    inputs.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"question {i}"}]}) + "\n"
                              for i in range(5)))
    first = produce(kafka_config, inputs, TOKENIZER_DIR)
    assert first.returncode == 0, first.stderr
    topic = kafka_config.prompts_topic

    for tokenizer, what in ((other_template(tmp_path / "template"), "chat template"),
                            (other_tokenizer(tmp_path / "special"), "tokenizer")):
        refused = produce(kafka_config, inputs, tokenizer)
        assert refused.returncode == 1, refused.stderr
        errors = [line for line in refused.stderr.splitlines() if " ERROR " in line]
        assert len(errors) == 1, refused.stderr
        assert f"{topic} holds prompts of another {what}: {TOKENIZER_DIR} (tokenizer " in errors[0]
        assert f"this run renders with {tokenizer} (tokenizer " in errors[0]
        assert errors[0].endswith("use another --topic-prefix, or pass --allow-mixed to publish into it "
                                  "anyway")
        assert len(read_topic(kafka_config, topic)) == 5  # nothing of it was published

    again = produce(kafka_config, inputs, TOKENIZER_DIR)  # the tokenizer in use is welcome
    assert again.returncode == 0, again.stderr
    mixed = produce(kafka_config, inputs, tmp_path / "template", "--allow-mixed")
    assert mixed.returncode == 0, mixed.stderr
    hashes = {PROMPT.decode(r.value)["chat_template_hash"] for r in read_topic(kafka_config, topic)}
    assert len(hashes) == 2
