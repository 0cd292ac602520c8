"""Length percentiles and the frameworks' default cuts in ``eaglefeed stats``, checked against the rows."""

import json

import numpy as np
import pyarrow.parquet as pq

from eaglefeed.cli.main import main
from eaglefeed.dataset.lengths import LengthCounts
from eaglefeed.dataset.stats import compute_stats
from tests.unit.dataset.test_export import make_dataset
from tests.unit.dataset.test_export_lengths import long_dataset


def test_percentiles_are_exact_nearest_rank():
    values = np.array([5, 1, 9, 9, 2, 7, 3, 3, 3, 100])
    counts = LengthCounts()
    counts.add(values[:4])
    counts.add(values[4:])
    for p in (1, 50, 90, 99, 100):
        assert counts.percentile(p) == int(np.percentile(values, p, method="inverted_cdf"))
    assert LengthCounts().summary() == {"p50": 0, "p90": 0, "p99": 0, "max": 0}


def test_stats_reports_length_percentiles_of_the_rows(tmp_path):
    make_dataset(tmp_path / "d", rows=90)
    table = pq.read_table(tmp_path / "d" / "segments", columns=["seq_len", "prompt_len"])
    seq = table.column("seq_len").to_numpy()
    out = seq - table.column("prompt_len").to_numpy()
    stats = compute_stats(tmp_path / "d").as_dict()
    for name, values in (("seq_len_percentiles", seq), ("output_len_percentiles", out)):
        assert stats[name] == {"p50": int(np.percentile(values, 50, method="inverted_cdf")),
                               "p90": int(np.percentile(values, 90, method="inverted_cdf")),
                               "p99": int(np.percentile(values, 99, method="inverted_cdf")),
                               "max": int(values.max())}


def test_stats_says_what_each_frameworks_default_would_cost(tmp_path, capsys):
    long_dataset(tmp_path / "d")  # 2000+100 cut by 52; 2100+10 emptied; 2040+8 fits
    cuts = compute_stats(tmp_path / "d").as_dict()["framework_default_cuts"]
    assert cuts["specforge"] == {"max_length": 2048, "over": 2, "dropped_rows": 1, "lost_loss_tokens": 62}
    assert cuts["speculators"] == {"max_length": 8192, "over": 0, "dropped_rows": 0, "lost_loss_tokens": 0}
    assert main(["stats", str(tmp_path / "d")]) == 0
    text = capsys.readouterr().out
    assert "length percentiles (p50 / p90 / p99 / max): seq_len 2048 / 2110 / 2110 / 2110" in text
    assert ("at the specforge default max length 2048: 2 rows longer, 1 of them left with no loss token, "
            "62 loss tokens lost") in text
    assert main(["stats", str(tmp_path / "d"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["seq_len_percentiles"]["max"] == 2110
