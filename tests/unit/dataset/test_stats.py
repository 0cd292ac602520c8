import json
import sys

import pytest

from eaglefeed.cli.main import main
from eaglefeed.core.errors import ConfigError
from eaglefeed.dataset import manifest, shards
from eaglefeed.dataset.compact import CompactOptions, compact
from eaglefeed.dataset.markers import FlagMarkers
from eaglefeed.dataset.stats import compute_stats, plot, render
from eaglefeed.schemas.columnar import GenerationBatch

FLAGS = {"t": FlagMarkers(reasoning=(3, 4), tool_call=(5,))}


def gen(i, prompt_len, output, finish="stop"):
    return {
        "id": f"r{i}", "prompt_id": f"p{i}", "sample_index": 0, "prompt_ids": [9] * prompt_len,
        "output_ids": list(output), "finish_reason": finish, "matched_stop": None,
        "prompt_tokens": prompt_len,
        "completion_tokens": len(output), "cached_tokens": 0, "latency_seconds": 0.1, "endpoint": "e",
        "model_path": "m", "engine_version": "v", "worker_id": "w", "source": "s", "source_row": str(i),
        "turn_index": 0, "sampling_params": "{}", "chat_template_kwargs": "{}", "tokenizer_id": "t",
        "tokenizer_hash": "h", "chat_template_hash": "c", "prompt_created_at": 1, "created_at": 2,
    }


@pytest.fixture
def dataset(tmp_path):
    root = tmp_path / "d"
    recs = [gen(0, 3, [3, 7, 4, 8, 2]), gen(1, 100, [5, 9] * 300, "length"), gen(2, 5, [8, 2]),
            gen(3, 5, [8] * 20, "abort")]
    table = shards.batch_to_table(GenerationBatch.from_records(recs), FLAGS)
    entry = shards.write_segment(root, "a.parquet", table)
    manifest.append_manifest(root, {"kind": "flush", "added": [entry], "offsets": {"g:0": [0, 6]},
                                    "duplicates": 2, "dead_lettered": 1})
    return root


def test_stats_count_rows_tokens_reasons_flags_and_lengths(dataset):
    stats = compute_stats(dataset)
    assert stats.rows == 4 and stats.files == 1
    assert stats.prompt_tokens == 113 and stats.output_tokens == 627
    assert stats.finish_reasons == {"stop": 2, "length": 1, "abort": 1}
    assert stats.reasoning == 1 and stats.tool_call == 1 and stats.flags_unknown == 0
    assert stats.duplicates_dropped == 2 and stats.dead_lettered == 1
    data = stats.as_dict()
    assert data["output_len_hist"] == {"2–3": 1, "4–7": 1, "16–31": 1, "512–1023": 1}
    assert data["prompt_len_hist"] == {"2–3": 1, "4–7": 2, "64–127": 1}
    text = render(stats)
    assert "rows: 4 in 1 files" in text and "stop 2 (50.0%)" in text and "with reasoning: 1 (25.0%)" in text
    assert "duplicates dropped by the sink: 2" in text


def test_stats_show_what_compaction_dropped(dataset):
    compact(dataset, CompactOptions(target_bytes=1, drop_finish_reasons=frozenset({"length", "abort"})))
    stats = compute_stats(dataset)
    assert stats.rows == 2
    assert stats.dropped_by_compaction == {"finish_reason:length": 1, "finish_reason:abort": 1}
    assert "dropped by compaction: finish_reason:abort 1, finish_reason:length 1" in render(stats)


def test_plot_draws_a_png(dataset, tmp_path):
    plot(compute_stats(dataset), tmp_path / "s.png")
    assert (tmp_path / "s.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_without_matplotlib_says_how_to_get_it(dataset, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ConfigError, match=r"pip install -e '\.\[plot\]'"):
        plot(compute_stats(dataset), tmp_path / "s.png")


def test_the_stats_command(dataset, tmp_path, capsys):
    assert main(["stats", str(dataset), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == 4
    assert main(["stats", str(dataset), "--plot", str(tmp_path / "p.png")]) == 0
    assert "finish reasons:" in capsys.readouterr().out and (tmp_path / "p.png").exists()
    assert main(["stats", str(tmp_path / "missing")]) == 1
    assert main(["stats", str(dataset), "--files"]) == 0
    assert capsys.readouterr().out.split() == [str(dataset / "segments" / "a.parquet")]


def test_stats_count_duplicate_ids_from_the_data_not_the_manifest(dataset):
    assert compute_stats(dataset).duplicate_ids == 0
    # a second sink (another group) wrote rows 0 and 1 again; the manifest knows nothing of it
    again = GenerationBatch.from_records([gen(0, 3, [2]), gen(1, 3, [2]), gen(9, 3, [2])])
    table = shards.batch_to_table(again, FLAGS)
    entry = shards.write_segment(dataset, "b.parquet", table)
    manifest.append_manifest(dataset, {"kind": "flush", "added": [entry], "offsets": {"g:0": [0, 3]}})
    stats = compute_stats(dataset)
    assert stats.rows == 7 and stats.duplicate_ids == 2 and stats.as_dict()["duplicate_ids"] == 2
    assert "duplicate ids in the data: 2 (WARNING" in render(stats)


def test_stats_count_rows_the_engine_capped(tmp_path):
    root = tmp_path / "c"
    recs = [{**gen(0, 3, [7, 8]), "capped_at": None},
            {**gen(1, 3, [7, 8, 9], "length"), "capped_at": 3}]
    table = shards.batch_to_table(GenerationBatch.from_records(recs), FLAGS)
    assert table.column("capped_at").to_pylist() == [None, 3]
    entry = shards.write_segment(root, "a.parquet", table)
    manifest.append_manifest(root, {"kind": "flush", "added": [entry], "offsets": {"g:0": [0, 2]}})
    stats = compute_stats(root)
    assert stats.capped == 1 and stats.as_dict()["capped"] == 1
    assert "capped by the engine below max_new_tokens (kept with --on-capped keep): 1" in render(stats)
