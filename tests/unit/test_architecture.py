"""The package boundaries the layout promises: who may import whom, and honest ``__all__`` lists."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("eaglefeed", "producers", "consumers", "schemas", "dataset")
# What each package may import from the others (eaglefeed's use of the stages is checked apart).
ALLOWED = {
    "schemas": {"eaglefeed"},
    "dataset": {"eaglefeed", "schemas"},
    "producers": {"eaglefeed", "schemas", "dataset"},
    "consumers": {"eaglefeed", "schemas", "dataset"},
    "eaglefeed": {"schemas", "dataset"},
}
STAGE_ENTRY_POINTS = {("consumers", "run_worker"), ("consumers", "run_sink"), ("consumers", "run_converse"),
                      ("producers", "run_producer")}
# The converse stage continues conversations with the producer's pure conversation library and
# renderer (the same code renders turn 0 and turn k): only it, and only those two modules.
NARROW = {"consumers/converse": {"eaglefeed.chat.conversation", "eaglefeed.chat.render"}}


def _imports(path: Path) -> list[tuple[str, tuple[str, ...]]]:
    """(module, names) of every import in ``path``, function-level imports included."""
    found: list[tuple[str, tuple[str, ...]]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.module, tuple(a.name for a in node.names)))
        elif isinstance(node, ast.Import):
            found.extend((a.name, ()) for a in node.names)
    return found


def _sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", PACKAGES)
def test_packages_import_only_what_the_layout_allows(package):
    wrong = []
    for path in _sources(package):
        for module, names in _imports(path):
            top = module.split(".")[0]
            if top not in PACKAGES or top == package:
                continue
            if package == "eaglefeed" and top in ("consumers", "producers"):
                # The CLI (and the demo job) start a stage through its entry point, nothing deeper.
                if module != top or not {(top, n) for n in names} <= STAGE_ENTRY_POINTS:
                    wrong.append(f"{path.relative_to(ROOT)}: from {module} import {', '.join(names)}")
            elif top not in ALLOWED[package] and not _narrowly_allowed(path, module):
                wrong.append(f"{path.relative_to(ROOT)}: imports {module}")
    assert not wrong, "\n".join(wrong)


def _narrowly_allowed(path: Path, module: str) -> bool:
    rel = path.relative_to(ROOT).as_posix()
    return any(rel.startswith(folder + "/") and module in modules for folder, modules in NARROW.items())


@pytest.mark.parametrize("package", [*PACKAGES[1:], "eaglefeed.consumers.generate",
                                     "eaglefeed.consumers.sink", "eaglefeed.consumers.converse"])
def test_all_lists_exactly_the_public_names(package):
    module = importlib.import_module(package)
    exported = set(module.__all__)
    assert all(hasattr(module, name) for name in exported)
    public = {n for n in vars(module) if not n.startswith("_")} - {"annotations"}
    submodules = {n for n in public if type(getattr(module, n)).__name__ == "module"}
    assert public - submodules == exported


def test_the_rules_catch_a_stage_reaching_into_another(tmp_path, monkeypatch):
    """The check itself can fail: a producer module importing the worker's internals is reported."""
    bad = tmp_path / "producers"
    bad.mkdir()
    (bad / "oops.py").write_text("from eaglefeed.consumers.generate.offsets import OffsetTracker\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    with pytest.raises(AssertionError, match="eaglefeed.consumers.generate.offsets"):
        test_packages_import_only_what_the_layout_allows("producers")


def test_only_the_converse_stage_may_use_the_conversation_library(tmp_path, monkeypatch):
    """The narrow exception does not open consumers/ to producers/ at large."""
    for folder, module in (("consumers/sink", "eaglefeed.chat.conversation"),
                           ("consumers/converse", "eaglefeed.producers.build")):
        bad = tmp_path / folder
        bad.mkdir(parents=True, exist_ok=True)
        (bad / "oops.py").write_text(f"import {module}\n")
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    with pytest.raises(AssertionError) as caught:
        test_packages_import_only_what_the_layout_allows("consumers")
    assert "consumers/sink/oops.py" in str(caught.value) and "eaglefeed.producers.build" in str(caught.value)
