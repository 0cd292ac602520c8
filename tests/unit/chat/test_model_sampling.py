"""Sampling defaults come from the model's generation_config.json, else neutral values (issue 27 item 6).

They were Qwen3's recommendations (temperature 0.6, top_p 0.95, top_k 20) for every model.
"""

from __future__ import annotations

import json
import shutil

import pytest
from huggingface_hub import constants

from eaglefeed.chat.sampling import model_sampling
from eaglefeed.cli.main import build_parser
from eaglefeed.cli.produce import producer_config
from eaglefeed.core.config import ProducerConfig, SamplingDefaults
from eaglefeed.core.errors import ConfigError
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.producers.build import PromptBuilder
from eaglefeed.producers.sources import SourceRow
from eaglefeed.schemas import PROMPT

LLAMA = {"bos_token_id": 128000, "do_sample": True, "eos_token_id": [128001, 128009],
         "temperature": 0.6, "top_p": 0.9, "transformers_version": "4.42.3"}
NEUTRAL = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0}


@pytest.fixture
def model_dir(tmp_path):
    """A local tokenizer directory with the model's generation_config.json beside it."""
    root = tmp_path / "llama"
    shutil.copytree(TOKENIZER_DIR, root)
    (root / "generation_config.json").write_text(json.dumps(LLAMA))
    return root


def config(*argv: str) -> ProducerConfig:
    return producer_config(build_parser().parse_args(["produce", "in.jsonl", *argv]))


def sampling_of(*argv: str) -> dict[str, object]:
    params = config(*argv).prompts.sampling.as_params()
    return {k: params[k] for k in NEUTRAL}


def test_the_defaults_are_the_models_own_when_its_generation_config_is_beside_the_tokenizer(model_dir):
    got = sampling_of("--tokenizer", str(model_dir))
    assert got == {"temperature": 0.6, "top_p": 0.9, "top_k": -1, "min_p": 0.0}  # unset in it: neutral
    note = config("--tokenizer", str(model_dir)).sampling_note  # logged when the run starts
    assert str(model_dir / "generation_config.json") in note and "temperature=0.6" in note
    assert config("--tokenizer", str(model_dir), "--temperature", "1", "--top-p", "1", "--top-k", "1",
                  "--min-p", "0").sampling_note == ""  # nothing to say: every one was given


def test_a_flag_still_overrides_the_model(model_dir):
    assert sampling_of("--tokenizer", str(model_dir), "--temperature", "0.2", "--top-k", "5") == {
        "temperature": 0.2, "top_p": 0.9, "top_k": 5, "min_p": 0.0}


def test_without_a_generation_config_the_defaults_are_neutral():
    assert not (TOKENIZER_DIR / "generation_config.json").exists()
    assert sampling_of("--tokenizer", str(TOKENIZER_DIR)) == NEUTRAL
    assert "neutral: no generation_config.json" in config("--tokenizer", str(TOKENIZER_DIR)).sampling_note
    defaults = SamplingDefaults()
    assert {k: getattr(defaults, k) for k in NEUTRAL} == NEUTRAL  # also for code that builds settings itself


def test_the_models_defaults_are_sent_explicitly_and_recorded_with_every_prompt(model_dir):
    builder = PromptBuilder(config("--tokenizer", str(model_dir)).prompts, fast=False)
    row = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
    [(_key, value, _n)] = builder.build([SourceRow("in.jsonl", 1, row)]).prompts
    recorded = PROMPT.decode(value)["sampling_params"]
    assert {k: recorded[k] for k in NEUTRAL} == {"temperature": 0.6, "top_p": 0.9, "top_k": -1, "min_p": 0.0}


def test_a_hub_id_reads_the_file_from_the_hugging_face_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    root = tmp_path / "models--Qwen--Qwen3-8B"
    (root / "refs").mkdir(parents=True)
    (root / "refs" / "main").write_text("abc123")
    (root / "snapshots" / "abc123").mkdir(parents=True)
    qwen = {"do_sample": True, "temperature": 0.6, "top_k": 20, "top_p": 0.95}
    (root / "snapshots" / "abc123" / "generation_config.json").write_text(json.dumps(qwen))
    found = model_sampling("Qwen/Qwen3-8B")
    assert found.values == {"temperature": 0.6, "top_k": 20, "top_p": 0.95}
    assert found.source == root / "snapshots" / "abc123" / "generation_config.json"
    missing = model_sampling("meta-llama/Llama-3.1-8B-Instruct")  # not downloaded: nothing is fetched
    assert missing.values == {} and "hf download" in missing.describe("meta-llama/Llama-3.1-8B-Instruct")


@pytest.mark.parametrize(("values", "expected"), [
    ({"top_k": 0, "temperature": 1}, {"top_k": -1, "temperature": 1.0}),  # transformers' 0: no top-k filter
    ({"top_k": 50.0, "top_p": None, "min_p": 0.05}, {"top_k": 50, "min_p": 0.05}),
    ({"do_sample": False, "repetition_penalty": 1.1}, {}),  # not sampling parameters a prompt carries
])
def test_the_files_values_are_normalized_as_the_engines_read_them(model_dir, values, expected):
    (model_dir / "generation_config.json").write_text(json.dumps(values))
    assert model_sampling(str(model_dir)).values == expected


def test_a_bad_value_in_the_file_names_the_file_unless_a_flag_replaces_it(model_dir):
    (model_dir / "generation_config.json").write_text(json.dumps({"top_p": 0.0, "temperature": 0.7}))
    with pytest.raises(ConfigError, match=r"generation_config.json: sampling parameter top_p=0.0"):
        sampling_of("--tokenizer", str(model_dir))
    assert sampling_of("--tokenizer", str(model_dir), "--top-p", "0.8")["temperature"] == 0.7
    (model_dir / "generation_config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read"):
        model_sampling(str(model_dir))


def test_a_relative_tokenizer_directory_is_read_and_named_absolute(model_dir, monkeypatch):
    monkeypatch.chdir(model_dir.parent)
    cfg = config("--tokenizer", model_dir.name)
    assert cfg.prompts.sampling.temperature == 0.6
    assert f"from {model_dir.absolute() / 'generation_config.json'}:" in cfg.sampling_note
