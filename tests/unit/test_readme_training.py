"""Every command of docs/TRAINING.md's "Train with SpecForge / with speculators" section runs as written.

Here the eaglefeed commands run on a small dataset (the torch formats must then say how to get
torch); tests/engine/test_frameworks.py runs all of them, speculators' included, on the demo.
"""

from __future__ import annotations

import importlib.util
import logging
import shlex
from pathlib import Path

import pytest

from eaglefeed.cli.main import main
from tests.unit.dataset.test_export import make_dataset

TRAINING = Path(__file__).resolve().parents[2] / "docs" / "TRAINING.md"
SECTION = "## Train with SpecForge / with speculators"


def readme_commands() -> list[list[str]]:
    """The commands of the section's sh blocks (continuations joined, comments left out)."""
    text = TRAINING.read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in text.split("```sh\n")[1:]:
        body = block.split("```", 1)[0].replace("\\\n", " ")
        lines = [line for line in body.splitlines() if line.strip() and not line.startswith("#")]
        commands += [shlex.split(line) for line in lines]
    return commands


def test_the_section_shows_each_step():
    names = [" ".join(c[:2]) for c in readme_commands()]
    assert names == ["eaglefeed stats", "eaglefeed export", "eaglefeed vocab-map", "eaglefeed export",
                     "speculators prepare-data", "eaglefeed vocab-map"]


def test_the_eaglefeed_commands_run_as_written(tmp_path, monkeypatch, caplog):
    make_dataset(tmp_path / "DIR", rows=30)
    (tmp_path / "train").mkdir()
    monkeypatch.chdir(tmp_path)
    has_torch = importlib.util.find_spec("torch") is not None
    for command in readme_commands():
        if command[0] != "eaglefeed":
            continue
        needs_torch = command[1] == "vocab-map" and command[command.index("--format") + 1] in (
            "specforge", "token-freq")
        caplog.clear()
        with caplog.at_level(logging.ERROR):
            code = main(command[1:])
        if needs_torch and not has_torch:
            assert code == 1 and "pip install -e '.[torch]'" in caplog.text
        else:
            assert code == 0, (command, caplog.text)
    assert (tmp_path / "train" / "prompts.jsonl").is_file() and (tmp_path / "train" / "data.jsonl").is_file()
    assert (tmp_path / "prepared" / "d2t-32000.npy").is_file()


@pytest.mark.parametrize("flag", ["--max-length", "--length-policy", "--draft-vocab-size",
                                  "--target-vocab-size"])
def test_the_flags_the_section_uses_exist(flag, capsys):
    for command in ("export", "vocab-map"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
    assert flag in capsys.readouterr().out
