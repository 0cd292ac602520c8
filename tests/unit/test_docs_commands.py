"""The shell blocks of README.md and docs/*.md name only commands, flags and make targets that exist.

Every ```sh block of the reference pages (docs/journal/ is history and left out) is split into
commands; each ``eaglefeed <command> --flag`` must be a flag of that command (or of ``eaglefeed``
itself) in the CLI's own parser, each ``make <target>`` a target of the Makefile, and each
``python -m`` of ``bench``/``reliability`` a module of the repository. Every
``EAGLEFEED_*`` variable a page names must be one some option reads (or warns about).
"""

from __future__ import annotations

import argparse
import re
import shlex
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from eaglefeed.cli._env_names import commands, env_names, options
from eaglefeed.cli.main import build_parser
from eaglefeed.core.config import OTHER_ENV, PIPELINE_WIDE_ENV

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_FENCE = re.compile(r"^```(?:sh|bash|shell|console)\n(.*?)^```", re.S | re.M)
SEPARATORS = {"&&", "||", ";", "|", "&"}


def shell_blocks(text: str) -> list[str]:
    """The bodies of the markdown text's shell blocks, line continuations joined."""
    return [body.replace("\\\n", " ") for body in SHELL_FENCE.findall(text)]


def shell_commands(block: str) -> Iterator[list[str]]:
    """Each command of a shell block as words: comments dropped, split at ``&&``, ``|``, ``;``, ``&``."""
    for line in block.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words: list[str] = []
        for word in lexer:
            if word in SEPARATORS:
                if words:
                    yield words
                words = []
            else:
                words.append(word)
        if words:
            yield words


@cache
def cli_flags() -> tuple[frozenset[str], dict[str, frozenset[str]]]:
    """The flags of ``eaglefeed`` itself, and each command's flags by command name."""
    parser = build_parser()
    by_command = dict(commands(parser))
    top = _flags(by_command.pop(""))
    return top, {name: _flags(sub) for name, sub in by_command.items()}


def _flags(parser: argparse.ArgumentParser) -> frozenset[str]:
    return frozenset(flag for action in parser._actions for flag in action.option_strings)


@cache
def make_targets() -> frozenset[str]:
    """The targets the Makefile defines."""
    text = (ROOT / "Makefile").read_text()
    return frozenset(re.findall(r"^([A-Za-z][\w.-]*)\s*:(?!=)", text, flags=re.M))


@cache
def known_variables() -> frozenset[str]:
    """Every ``EAGLEFEED_*`` name (without the prefix) an option reads, or names in a warning."""
    names = set(PIPELINE_WIDE_ENV) | set(OTHER_ENV)
    for _, sub in commands(build_parser()):
        for action in options(sub):
            bound = env_names(action)
            if bound is not None:
                names.update(bound.read, bound.ignored)
    return frozenset(names)


def problems(text: str) -> list[str]:
    """What the shell blocks of ``text`` get wrong: unknown commands, flags, make targets, variables."""
    found = []
    for block in shell_blocks(text):
        for words in shell_commands(block):
            found += _eaglefeed_problems(words) + _make_problems(words) + _module_problems(words)
    for name in sorted(set(re.findall(r"\bEAGLEFEED_([A-Z][A-Z0-9_]*[A-Z0-9])", text))):
        if name not in known_variables():
            found.append(f"unknown variable EAGLEFEED_{name}")
    return found


def _eaglefeed_problems(words: list[str]) -> list[str]:
    start = next((i for i, w in enumerate(words) if Path(w).name == "eaglefeed"), None)
    if start is None:
        return []
    top, by_command = cli_flags()
    args = [w.strip("[]") for w in words[start + 1:]]
    command = next((a for a in args if a in by_command), None)
    if command is None:
        return [f"unknown command: {' '.join(words)}"]
    allowed = top | by_command[command]
    flags = [a.split("=", 1)[0] for a in args if a.startswith("--") and a != "--"]
    return [f"eaglefeed {command}: unknown flag {flag}" for flag in flags if flag not in allowed]


def _make_problems(words: list[str]) -> list[str]:
    if Path(words[0]).name != "make":
        return []
    targets = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
    return [f"make: unknown target {t}" for t in targets if t not in make_targets()]


def _module_problems(words: list[str]) -> list[str]:
    """``python -m bench.x`` / ``reliability`` / ``eaglefeed``: the module must be in the repository."""
    if "-m" not in words[:-1] or not Path(words[0]).name.startswith("python"):
        return []
    module = words[words.index("-m") + 1]
    if module.split(".")[0] not in ("bench", "reliability", "eaglefeed"):
        return []
    path = ROOT.joinpath(*module.split("."))
    return [] if path.with_suffix(".py").is_file() or (path / "__main__.py").is_file() else [
        f"python -m {module}: no such module"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shell_block_names_what_exists(page: Path) -> None:
    assert problems(page.read_text()) == []


def test_the_pages_hold_shell_blocks_with_eaglefeed_and_make_commands() -> None:
    words = [w for page in PAGES for block in shell_blocks(page.read_text()) for w in shell_commands(block)]
    assert sum(Path(w[0]).name == "eaglefeed" for w in words) >= 30
    assert {"demo", "test"} <= {w[1] for w in words if w[0] == "make" and len(w) > 1}


def test_the_readme_keeps_the_two_set_up_commands() -> None:
    block = shell_blocks((ROOT / "README.md").read_text())[0]
    assert list(shell_commands(block)) == [["make", "demo"], ["make", "test"]]


@pytest.mark.parametrize(("text", "expected"), [
    ("eaglefeed generate --sglang-url http://h:1 --no-such-flag 3", [
        "eaglefeed generate: unknown flag --no-such-flag"]),
    ("eaglefeed sink --output d --concurrency 4", ["eaglefeed sink: unknown flag --concurrency"]),
    ("eaglefeed --config r.toml produce p.jsonl --tokenzier t", [
        "eaglefeed produce: unknown flag --tokenzier"]),
    (".venv/bin/eaglefeed frobnicate --x", [
        "unknown command: .venv/bin/eaglefeed frobnicate --x"]),
    ("make demo && make tests  # a typo", ["make: unknown target tests"]),
    (".venv/bin/python -m bench.no_such_bench --quick", ["python -m bench.no_such_bench: no such module"]),
    (".venv/bin/python -m reliability --quick", []),
    ("eaglefeed stats DIR [--plot lengths.png]  # --not-a-flag in a comment", []),
    ("EAGLEFEED_GENERATE_SGLANG_URL=http://h:1 eaglefeed generate --concurrency=auto", []),
    ("eaglefeed export DIR --format specforge \\\n    --out p.jsonl --max-lenght 4", [
        "eaglefeed export: unknown flag --max-lenght"]),
])
def test_the_checker_finds_a_planted_mistake(text: str, expected: list[str]) -> None:
    assert problems(f"prose\n\n```sh\n{text}\n```\n") == expected


def test_an_unknown_variable_is_found_in_prose_too() -> None:
    assert problems("set `EAGLEFEED_GENERATE_CONCURENCY=8`") == [
        "unknown variable EAGLEFEED_GENERATE_CONCURENCY"]
    assert problems("set `EAGLEFEED_GENERATE_CONCURRENCY=8`") == []


def test_the_readme_by_hand_block_runs_on_a_fresh_clone_and_says_how_to_use_your_own_tokenizer():
    """After `make install`: the venv first, every path it names bundled, a line for your own tokenizer."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Running it by hand on the stand-in", 1)[1].split("\n## ", 1)[0]
    block = SHELL_FENCE.search(section)
    assert block is not None
    lines = [line.split("#", 1)[0].strip() for line in block.group(1).splitlines()]
    assert lines[0] == "source .venv/bin/activate" and "make install" in section
    for word in (w for line in lines for w in shlex.split(line)):
        if word.startswith("eaglefeed/"):
            assert (ROOT / word).exists(), word  # bundled with the clone
    assert "`eaglefeed stub-sglang --port 30000 --tokenizer DIR &`" in section
    assert "--tokenizer" in next(o for o in options(dict(commands(build_parser()))["stub-sglang"])
                                  if "--tokenizer" in o.option_strings).option_strings
    assert len(text.splitlines()) <= 250
