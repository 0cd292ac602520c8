"""Draft vocabularies: the frameworks' selection rule, the files, and the command."""

import importlib.util
from collections import Counter

import numpy as np
import pytest

from eaglefeed.cli.main import main
from eaglefeed.core.errors import ConfigError
from eaglefeed.dataset import vocab
from eaglefeed.dataset.freq import snapshot_counts
from tests.unit.dataset.test_export import make_dataset
from tests.unit.dataset.test_freq import counts_from_parquet

HAS_TORCH = importlib.util.find_spec("torch") is not None


def reference(freqs: dict[int, int], draft: int) -> list[int]:
    """The rule both frameworks apply, written plainly: most frequent first, then smallest unused ids."""
    chosen = sorted(freqs, key=lambda t: (-freqs[t], t))[:draft]
    chosen += [t for t in range(draft) if t not in chosen][:draft - len(chosen)]
    return sorted(chosen)


def dense(freqs):
    out = np.zeros(max(freqs) + 1, np.int64)
    for token, count in freqs.items():
        out[token] = count
    return out


@pytest.mark.parametrize("draft", [1, 3, 5, 8])
def test_the_draft_vocabulary_follows_the_frameworks_rule(draft):
    freqs = {7: 5, 2: 5, 9: 1, 4: 3, 11: 0}
    chosen = vocab.draft_vocab(dense(freqs), draft_size=draft, target_size=16)
    assert chosen.draft_ids.tolist() == reference({k: v for k, v in freqs.items() if v}, draft)
    assert chosen.d2t.dtype == np.int64 and chosen.d2t.size == draft
    assert chosen.t2d.dtype == np.bool_ and chosen.t2d.size == 16
    assert np.flatnonzero(chosen.t2d).tolist() == chosen.draft_ids.tolist()
    covered = sum(v for k, v in freqs.items() if k in chosen.draft_ids.tolist())
    assert chosen.coverage == pytest.approx(covered / 14)


def test_an_id_beyond_the_target_vocabulary_is_a_clear_error():
    with pytest.raises(ConfigError, match="token id 20 occurs .* --target-vocab-size is 16"):
        vocab.draft_vocab(dense({20: 1}), draft_size=4, target_size=16)
    with pytest.raises(ConfigError, match="draft-vocab-size"):
        vocab.draft_vocab(dense({2: 1}), draft_size=32, target_size=16)


def test_speculators_files_are_the_npy_pair_its_trainer_looks_for(tmp_path, capsys):
    make_dataset(tmp_path / "d", rows=60)
    out = tmp_path / "prepared"
    code = main(["vocab-map", str(tmp_path / "d"), "--format", "speculators", "--draft-vocab-size", "64",
                 "--target-vocab-size", "151000", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    expected = counts_from_parquet(tmp_path / "d")
    assert f"{sum(expected.values())} loss tokens in 60 rows, {len(expected)} distinct ids" in printed
    assert sorted(p.name for p in out.iterdir()) == ["d2t-64.npy", "t2d-64.npy"]
    d2t, t2d = np.load(out / "d2t-64.npy"), np.load(out / "t2d-64.npy")
    assert d2t.dtype == np.int64 and t2d.dtype == np.bool_ and t2d.shape == (151000,)
    assert (d2t + np.arange(64)).tolist() == reference(dict(expected), 64)


def test_vocab_map_needs_both_sizes(tmp_path):
    make_dataset(tmp_path / "d", rows=9)
    assert main(["vocab-map", str(tmp_path / "d"), "--format", "speculators", "--draft-vocab-size", "8",
                 "--out", str(tmp_path / "o")]) == 1


@pytest.mark.skipif(HAS_TORCH, reason="checks the message shown when torch is absent")
@pytest.mark.parametrize("fmt", ["specforge", "token-freq"])
def test_torch_formats_say_how_to_get_torch(tmp_path, fmt, caplog):
    make_dataset(tmp_path / "d", rows=9)
    assert main(["vocab-map", str(tmp_path / "d"), "--format", fmt, "--draft-vocab-size", "8",
                 "--target-vocab-size", "151000", "--out", str(tmp_path / "v.pt")]) == 1
    assert "pip install -e '.[torch]'" in caplog.text
    assert not (tmp_path / "v.pt").exists()


def test_counts_of_the_command_are_the_snapshot_counts(tmp_path):
    make_dataset(tmp_path / "d", rows=30)
    counts = snapshot_counts(tmp_path / "d")
    ids, freqs = counts.counter.sparse()
    as_counter = Counter(dict(zip(ids.tolist(), freqs.tolist(), strict=True)))
    assert as_counter == counts_from_parquet(tmp_path / "d")
