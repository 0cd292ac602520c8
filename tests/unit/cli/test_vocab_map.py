"""``eaglefeed vocab-map`` refuses what it cannot finish before it reads a single file."""

from __future__ import annotations

import importlib.util
import logging

import pytest

from eaglefeed.cli.main import main
from tests.unit.dataset.test_export import make_dataset

HAS_TORCH = importlib.util.find_spec("torch") is not None


def errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def test_help_says_the_sizes_are_required_for_specforge_and_speculators(capsys):
    with pytest.raises(SystemExit):
        main(["vocab-map", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "e.g. 32000); required for --format specforge and speculators" in help_text
    assert "the length of t2d; required for --format specforge and speculators" in help_text


def test_a_missing_draft_vocab_size_is_one_line_naming_it_before_any_counting(tmp_path, capsys, caplog):
    make_dataset(tmp_path / "d", rows=9)
    assert main(["vocab-map", str(tmp_path / "d"), "--format", "speculators", "--target-vocab-size", "4096",
                 "--out", str(tmp_path / "o")]) == 1
    assert errors(caplog) == [
        "vocab-map --format speculators needs --draft-vocab-size N (the draft config's draft_vocab_size)"]
    assert capsys.readouterr().out == ""  # no token count first
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(HAS_TORCH, reason="checks what is said when torch is absent")
@pytest.mark.parametrize("fmt", ["specforge", "token-freq"])
def test_missing_torch_is_said_before_the_tokens_are_counted(tmp_path, capsys, caplog, fmt):
    make_dataset(tmp_path / "d", rows=9)
    assert main(["vocab-map", str(tmp_path / "d"), "--format", fmt, "--draft-vocab-size", "8",
                 "--target-vocab-size", "151000", "--out", str(tmp_path / "v.pt")]) == 1
    assert errors(caplog) == [
        f"vocab-map --format {fmt} writes a torch file and needs torch: pip install torch (from a clone: "
        "pip install -e '.[torch]'); --format speculators needs none"]
    assert "loss tokens" not in capsys.readouterr().out
    assert not (tmp_path / "v.pt").exists()
