"""Per-row sampling mixes on the real broker and the SGLang stand-in, through the CLI (issue 23):
``produce --temperature-cycle`` and ``--template-kwargs-cycle`` give rows of every temperature and
every set of template kwargs, each row records the ones it used and its prompt is the tokenizer's own
rendering with them, ``stats`` counts them, a rerun reproduces them, and a regenerated conversation
keeps its draw on every turn."""

from __future__ import annotations

import json
import subprocess
from collections import Counter

import pytest
from transformers import AutoTokenizer

import eaglefeed
from eaglefeed.chat.prompts import parse_row, source_identity
from eaglefeed.core.mixes import SamplingMix, parse_temperature_cycle, parse_template_kwargs_cycle
from eaglefeed.devtools.demo import TOKENIZER_DIR
from tests.cli import kafka_flags, run_cli
from tests.integration.conversation_support import Pipeline, Rerendering, lanes_of, read_rows

pytestmark = pytest.mark.kafka

TEMPERATURES = "0,0.6,1.0"
KWARGS = "enable_thinking=true,false"
MIX_FLAGS = ("--temperature-cycle", TEMPERATURES, "--template-kwargs-cycle", KWARGS)
MIX = SamplingMix(temperatures=parse_temperature_cycle(TEMPERATURES),
                  template_kwargs=parse_template_kwargs_cycle(KWARGS))


def run(command: str, *flags: str, kafka=None) -> subprocess.CompletedProcess[str]:
    done = run_cli(command, *flags, *([] if kafka is None else kafka_flags(kafka)))
    assert done.returncode == 0, done.stderr
    return done


def drawn(row: dict) -> tuple[float, str]:
    """What the mix gives this source row: (temperature, template kwargs as recorded)."""
    t, k = MIX.draw(source_identity(parse_row(row, default_id="")))
    assert t is not None and k is not None
    return MIX.temperatures[t][0], json.dumps(dict(MIX.template_kwargs[k][0]))


def test_rows_of_every_temperature_and_kwargs_land_recorded_and_counted_by_stats(
        kafka_config, standin_factory, tmp_path):
    sources = [{"id": f"q{i}", "messages": [{"role": "user", "content": f"Count to {i}."}]}
               for i in range(24)]
    inputs = tmp_path / "prompts.jsonl"
    inputs.write_text("".join(json.dumps(r) + "\n" for r in sources))
    url = standin_factory("--latency-model", "none", "--output-len-mean", "8")
    produce = ("produce", str(inputs), "--tokenizer", str(TOKENIZER_DIR), "--samples", "2",
               "--state-dir", str(tmp_path / "state"))
    produced = run(*produce, *MIX_FLAGS, kafka=kafka_config)
    assert "published 24 prompts" in produced.stdout and "sampling mix" in produced.stderr
    run("generate", "--sglang-url", url, "--exit-when-idle", "3", kafka=kafka_config)
    out = tmp_path / "dataset"
    run("sink", "--output", str(out), "--exit-when-idle", "3", "--flush-seconds", "0.5", kafka=kafka_config)

    rows = eaglefeed.load(out).to_pylist()
    assert len(rows) == 48  # 24 prompts x 2 samples
    tok = AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))
    by_id = {s["id"]: s for s in sources}
    for row in rows:
        source = by_id[row["source_id"]]
        temperature, kwargs = drawn(source)
        # the row shows what it used: the temperature sent, the kwargs rendered with (every sample alike)
        assert json.loads(row["sampling_params"])["temperature"] == temperature
        assert row["chat_template_kwargs"] == kwargs
        expected = tok.apply_chat_template(source["messages"], add_generation_prompt=True, tokenize=True,
                                           return_dict=True, **json.loads(kwargs))["input_ids"]
        assert list(row["input_ids"][:row["prompt_len"]]) == list(expected)
    per_temperature = Counter(repr(json.loads(r["sampling_params"])["temperature"]) for r in rows)
    per_kwargs = Counter(r["chat_template_kwargs"] for r in rows)
    assert set(per_temperature) == {"0.0", "0.6", "1.0"} and len(per_kwargs) == 2
    assert all(n % 2 == 0 for n in per_temperature.values())  # both samples of a prompt share its draw

    stats = json.loads(run("stats", str(out), "--json").stdout)
    assert stats["temperatures"] == dict(sorted(per_temperature.items()))
    assert stats["chat_template_kwargs"] == dict(per_kwargs)
    text = run("stats", str(out)).stdout
    assert "temperatures: 0.0 " in text and "chat template kwargs: " in text
    print("rows per temperature:", dict(per_temperature), "per template kwargs:", dict(per_kwargs))

    # The same command resumes its run (nothing new); another cycle is another run, never a resume.
    again = run(*produce, *MIX_FLAGS, kafka=kafka_config)
    assert "published 0 prompts" in again.stdout, again.stdout
    other = run(*produce, "--temperature-cycle", "0.3,0.9", "--template-kwargs-cycle", KWARGS,
                kafka=kafka_config)
    assert "published 24 prompts" in other.stdout, other.stdout


def chat_row(i: int) -> dict:
    return {"id": f"chat-{i}", "messages": [
        {"role": "user", "content": f"Name a prime above {10 * i}."},
        {"role": "assistant", "content": "31."},
        {"role": "user", "content": "Why is it prime?"},
        {"role": "assistant", "content": "No divisor up to its square root."},
        {"role": "user", "content": "Give another one."},
    ]}


STANDIN = ("--latency-model", "none", "--think-fraction", "0.5", "--length-fraction", "0",
           "--output-len-mean", "16", "--output-len-sigma", "0.3", "--tool-call-fraction", "0")


def test_a_regenerated_conversation_keeps_its_draw_on_every_turn(kafka_config, standin_factory, tmp_path):
    sources = [chat_row(i) for i in range(8)]
    inputs = tmp_path / "conversations.jsonl"
    inputs.write_text("".join(json.dumps(r) + "\n" for r in sources))
    pipeline = Pipeline(kafka_config, standin_factory(*STANDIN), tmp_path / "dataset", tmp_path)
    try:
        pipeline.start_worker()
        run("produce", str(inputs), "--tokenizer", str(TOKENIZER_DIR), "--history", "rerender",
            "--samples", "2", "--max-new-tokens", "200", *MIX_FLAGS, kafka=kafka_config)
        view = pipeline.wait_ended(lanes=2 * len(sources))
        pipeline.wait_rows(view.turns_done)
    finally:
        pipeline.close()
    assert view.ended == {"complete": 16}, view
    rows = read_rows(tmp_path / "dataset")
    rerendering = Rerendering()
    by_id = {s["id"]: s for s in sources}
    lanes = lanes_of(rows)
    assert len(lanes) == 16 and {len(turns) for turns in lanes.values()} == {3}
    for turns in lanes.values():
        source = by_id[turns[0]["source_row"]]
        temperature, kwargs = drawn(source)
        assert {json.loads(r["sampling_params"])["temperature"] for r in turns} == {temperature}
        assert {r["chat_template_kwargs"] for r in turns} == {kwargs}
        # every turn rendered with the drawn kwargs, as the tokenizer's own template renders them
        expected = rerendering.rerender_prompts({**source, "chat_template_kwargs": json.loads(kwargs)}, turns)
        for row, prompt in zip(turns, expected, strict=True):
            where = (row["source_row"], row["turn_index"])
            assert list(row["input_ids"][:row["prompt_len"]]) == prompt, where
    assert len({r["chat_template_kwargs"] for r in rows}) == 2
    assert {json.loads(r["sampling_params"])["temperature"] for r in rows} == {0.0, 0.6, 1.0}
