"""``eaglefeed stats`` counts the rows of each temperature and each set of template kwargs they were
generated with (``produce --temperature-cycle`` / ``--template-kwargs-cycle``)."""

from __future__ import annotations

import json

from eaglefeed.cli.main import main
from eaglefeed.dataset import manifest, shards
from eaglefeed.dataset.markers import FlagMarkers
from eaglefeed.dataset.stats import compute_stats, render
from eaglefeed.schemas.columnar import GenerationBatch

LOW, HIGH = '{"reasoning_effort": "low"}', '{"reasoning_effort": "high"}'


def gen(i: int, sampling: str, kwargs: str) -> dict:
    return {
        "id": f"r{i}", "prompt_id": f"p{i}", "sample_index": 0, "prompt_ids": [9, 9], "output_ids": [8, 2],
        "finish_reason": "stop", "matched_stop": None, "prompt_tokens": 2, "completion_tokens": 2,
        "cached_tokens": 0, "latency_seconds": 0.1, "endpoint": "e", "model_path": "m", "engine_version": "v",
        "worker_id": "w", "source": "s", "source_row": str(i), "turn_index": 0, "sampling_params": sampling,
        "chat_template_kwargs": kwargs, "tokenizer_id": "t", "tokenizer_hash": "h", "chat_template_hash": "c",
        "prompt_created_at": 1, "created_at": 2,
    }


def sent(temperature: object, seed: int) -> str:
    params = {"temperature": temperature, "top_p": 1.0, "n": 1, "sampling_seed": seed}
    return json.dumps(params, sort_keys=True)


def test_stats_count_rows_per_temperature_and_per_template_kwargs(tmp_path):
    root = tmp_path / "d"
    recs = [gen(0, sent(0.0, 1), LOW), gen(1, sent(1.0, 2), LOW), gen(2, sent(0.6, 3), HIGH),
            gen(3, sent(1.0, 4), LOW), gen(4, sent(1, 5), "{}"), gen(5, "not json", LOW)]
    table = shards.batch_to_table(GenerationBatch.from_records(recs), {"t": FlagMarkers()})
    entry = shards.write_segment(root, "a.parquet", table)
    manifest.append_manifest(root, {"kind": "flush", "added": [entry], "offsets": {"g:0": [0, 6]}})
    stats = compute_stats(root)
    assert stats.temperatures == {"0.0": 1, "0.6": 1, "1.0": 3, "unknown": 1}  # 1 and 1.0 are one temperature
    assert stats.template_kwargs == {LOW: 4, HIGH: 1, "{}": 1}
    data = stats.as_dict()
    assert list(data["temperatures"]) == ["0.0", "0.6", "1.0", "unknown"]  # coolest first
    assert data["chat_template_kwargs"] == {LOW: 4, HIGH: 1, "{}": 1}
    text = render(stats)
    assert "temperatures: 0.0 1 (16.7%), 0.6 1 (16.7%), 1.0 3 (50.0%), unknown 1 (16.7%)" in text
    assert f"chat template kwargs: {LOW} 4 (66.7%), " in text
    assert main(["stats", str(root), "--json"]) == 0
