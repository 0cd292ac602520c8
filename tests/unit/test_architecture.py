"""The floor plan the layout promises: one namespace, a strict ladder of layers, honest ``__all__`` lists.

The ladder, lowest first: core < schemas < dataset < chat < stages < ops < cli. A module may import
its own wing and the wings below it; the stages (producers, consumers.generate, consumers.converse,
consumers.sink) never import each other, and the CLI starts a stage only through its package's
exports. devtools (stand-in, local broker, demo assets) stands beside the ladder: it may use core,
and only the CLI imports it (tests, benchmarks and the reliability harness may too).

Inside the generate stage, the inner rooms (``inference``: the server side; ``tokens``: the
tokenizer checks) never import the stage's Kafka side nor the ``kafka`` library: only their own
room, and the other room's face. No folder holds more than ``MAX_MODULES`` modules, and no module
reaches itself through its imports.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The real folders of the namespace: producers/, consumers/ and schemas/ join it through symlinks.
JOINED = {"producers": "eaglefeed.producers", "consumers": "eaglefeed.consumers",
          "schemas": "eaglefeed.schemas"}
LADDER = ("core", "schemas", "dataset", "chat", "stage", "ops", "cli")
STAGES = ("eaglefeed.producers", "eaglefeed.consumers.generate", "eaglefeed.consumers.converse",
          "eaglefeed.consumers.sink")
BARE = ("producers", "consumers", "schemas", "dataset")
OUTSIDE = ("tests", "bench", "reliability", "scripts")  # may import anything, but never a bare name
GENERATE = "eaglefeed.consumers.generate"
ROOMS = (f"{GENERATE}.inference", f"{GENERATE}.tokens")
"""The generate stage's inner rooms: each behind its face, neither knowing Kafka."""
MAX_MODULES = 20
"""The most modules (``.py`` files) one folder may hold directly; past that it wants rooms."""


def _modules(root: Path) -> dict[str, Path]:
    """Dotted name → file of every module of the namespace (symlinks not followed twice)."""
    found: dict[str, Path] = {}
    folders = [(root / "eaglefeed", "eaglefeed"), *((root / d, name) for d, name in JOINED.items())]
    for folder, prefix in folders:
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(folder)
            if folder.name == "eaglefeed" and rel.parts[0] in JOINED:
                continue  # the symlinks: listed once under their real folder
            parts = [prefix, *rel.with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _unit(module: str) -> str:
    """The wing (or, for a stage, the stage) a module belongs to."""
    for stage in STAGES:
        if module == stage or module.startswith(stage + "."):
            return stage
    parts = module.split(".")
    if len(parts) == 1 or parts[1] == "__init__":
        return "eaglefeed.core"  # the package itself installs core's log filters, nothing more
    if parts[1] == "__main__":
        return "eaglefeed.cli"
    if parts[1] == "consumers":
        return "eaglefeed.consumers"  # the namespace's empty __init__
    return f"eaglefeed.{parts[1]}"


def _layer(unit: str) -> int:
    if unit in STAGES or unit == "eaglefeed.consumers":
        return LADDER.index("stage")
    return LADDER.index(unit.split(".")[1])


def _imports(path: Path) -> list[tuple[str, tuple[str, ...], int]]:
    """(module, names, level) of every import in ``path``, function-level imports included."""
    return [(module, names, level) for module, names, level, _lazy in _all_imports(path)]


def _all_imports(path: Path) -> list[tuple[str, tuple[str, ...], int, bool]]:
    """(module, names, level, inside a function) of every import in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    lazy = {id(inner) for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            for inner in ast.walk(node)}
    found: list[tuple[str, tuple[str, ...], int, bool]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found.append((node.module or "", tuple(a.name for a in node.names), node.level, id(node) in lazy))
        elif isinstance(node, ast.Import):
            found.extend((a.name, (), 0, id(node) in lazy) for a in node.names)
    return found


def _target(module: str, names: tuple[str, ...], known: dict[str, Path]) -> list[str]:
    """The modules an import loads: ``from eaglefeed.dataset import ids`` loads eaglefeed.dataset.ids."""
    subs = [f"{module}.{n}" for n in names if f"{module}.{n}" in known]
    return subs or [module]


def violations(root: Path) -> list[str]:
    """Every import of the tree at ``root`` that breaks the floor plan, one line each."""
    known = _modules(root)
    wrong = []
    for importer, path in known.items():
        where = path.relative_to(root).as_posix()
        for module, names, level, lazy in _all_imports(path):
            if level:
                wrong.append(f"{where}: relative import (use eaglefeed.…)")
                continue
            top = module.split(".")[0]
            if top in BARE:
                wrong.append(f"{where}: imports the bare name {module}")
            if top == "kafka" and _room(importer):
                wrong.append(f"{where}: imports {module} (the inner rooms of generate never touch Kafka)")
            if top != "eaglefeed":
                continue
            for target in _target(module, names, known):
                if problem := _rule(importer, target, module, lazy=lazy) or _room_rule(importer, target):
                    wrong.append(f"{where}: imports {target} ({problem})")
    return wrong


def _room(module: str) -> str | None:
    """The inner room of generate a module belongs to, if any."""
    return next((room for room in ROOMS if module == room or module.startswith(room + ".")), None)


def _room_rule(importer: str, target: str) -> str | None:
    """An inner room imports its own modules, the other room's face, and nothing else of generate."""
    room = _room(importer)
    if room is None or _room(target) == room:
        return None
    if target in ROOMS:
        return None  # the other room's face
    if target == GENERATE or target.startswith(GENERATE + "."):
        inside = _room(target)
        return ("another room only through its face" if inside is not None
                else "the inner rooms of generate never import its Kafka side")
    return None


def _rule(importer: str, target: str, module: str, *, lazy: bool = False) -> str | None:
    mine, theirs = _unit(importer), _unit(target)
    if mine == theirs:
        return None
    if importer == "eaglefeed" and theirs == "eaglefeed.dataset":
        # the package's Python API (eaglefeed.load) reads datasets; every import of eaglefeed.*
        # runs the package first, so it imports dataset only when the API is called
        return None if lazy else "the package imports the dataset API inside its functions only"
    if theirs == "eaglefeed.devtools":
        return None if mine == "eaglefeed.cli" else "only the CLI uses devtools"
    if mine == "eaglefeed.devtools":
        return None if theirs == "eaglefeed.core" else "devtools uses core only"
    if mine in STAGES and theirs in STAGES:
        return "stages never import each other"
    if mine == "eaglefeed.cli" and theirs in STAGES:
        return None if module == theirs else "the CLI starts a stage through its package's exports only"
    if _layer(theirs) >= _layer(mine):
        return f"{mine.split('.')[-1]} may not import upward or sideways into {theirs.split('.')[-1]}"
    return None


def test_the_namespace_follows_the_ladder():
    wrong = violations(ROOT)
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("folder", OUTSIDE)
def test_nothing_imports_a_bare_top_level_name(folder):
    """tests/, bench/, reliability/ and scripts/ reach the code as eaglefeed.* only (one identity)."""
    wrong = [f"{path.relative_to(ROOT)}: {module}" for path in sorted((ROOT / folder).rglob("*.py"))
             for module, _, level in _imports(path) if not level and module.split(".")[0] in BARE]
    assert not wrong, "\n".join(wrong)


INFERENCE, TOKENS = "consumers/generate/inference", "consumers/generate/tokens"


@pytest.mark.parametrize(("where", "line", "reported"), [
    ("eaglefeed/core/oops.py", "from eaglefeed.dataset import ids\n", "core may not import upward"),
    ("schemas/oops.py", "import eaglefeed.chat.render\n", "eaglefeed.chat.render"),
    ("consumers/sink/oops.py", "from eaglefeed.consumers.generate.offsets import OffsetTracker\n",
     "stages never import each other"),
    ("producers/oops.py", "from eaglefeed.devtools import standin\n", "only the CLI uses devtools"),
    ("eaglefeed/dataset/oops.py", "from eaglefeed.ops.redrive import redrive\n", "eaglefeed.ops.redrive"),
    ("eaglefeed/cli/oops.py", "from eaglefeed.consumers.sink.loop import run_sink\n", "package's exports"),
    ("eaglefeed/chat/oops.py", "from dataset import ids\n", "bare name dataset"),
    ("eaglefeed/devtools/oops.py", "from eaglefeed.chat import render\n", "devtools uses core only"),
    ("eaglefeed/__init__.py", "from eaglefeed.dataset import load\n", "inside its functions only"),
    ("eaglefeed/__init__.py", "def load():\n    from eaglefeed.chat import render\n", "into chat"),
    (f"{INFERENCE}/oops.py", "from kafka.structs import TopicPartition\n", "never touch Kafka"),
    (f"{INFERENCE}/oops.py", "def f():\n    import kafka\n", "never touch Kafka"),
    (f"{INFERENCE}/oops.py", "from eaglefeed.consumers.generate.publish import Done\n", "its Kafka side"),
    (f"{TOKENS}/oops.py", "from eaglefeed.consumers.generate import loop\n", "its Kafka side"),
    (f"{TOKENS}/oops.py", "from eaglefeed.consumers.generate.inference.servers import Server\n",
     "through its face"),
])
def test_the_ladder_catches_a_deliberate_violation(tmp_path, where, line, reported):
    """The check itself can fail: each kind of wrong import in a copy of the tree is reported."""
    for folder in ("eaglefeed", *JOINED):
        (tmp_path / folder).mkdir()
    for folder in ("core", "dataset", "chat", "ops", "cli", "devtools"):
        (tmp_path / "eaglefeed" / folder).mkdir()
    for folder in ("sink", "generate/inference", "generate/tokens"):
        (tmp_path / "consumers" / folder).mkdir(parents=True)
    (tmp_path / where).write_text(line)
    wrong = violations(tmp_path)
    assert len(wrong) == 1 and reported in wrong[0], wrong


def test_allowed_imports_are_not_reported(tmp_path):
    (tmp_path / "eaglefeed" / "cli").mkdir(parents=True)
    (tmp_path / "consumers" / "sink").mkdir(parents=True)
    (tmp_path / "eaglefeed" / "cli" / "ok.py").write_text(
        "from eaglefeed.consumers.sink import run_sink\nfrom eaglefeed.devtools import standin\n")
    (tmp_path / "consumers" / "sink" / "ok.py").write_text(
        "from eaglefeed.dataset import ids\nfrom eaglefeed.core.clients import Consumer\n")
    (tmp_path / "eaglefeed" / "__init__.py").write_text(
        "from eaglefeed.core import quiet\n\n\ndef load():\n    from eaglefeed.dataset import load\n")
    for room in ("inference", "tokens"):
        (tmp_path / "consumers" / "generate" / room).mkdir(parents=True)
    (tmp_path / TOKENS / "ok.py").write_text(
        "from eaglefeed.consumers.generate.inference import ServerPool\n"
        "from eaglefeed.consumers.generate.tokens.agreement import PROBES\n"
        "from eaglefeed.core.errors import ConfigError\n")
    (tmp_path / "consumers" / "generate" / "loop.py").write_text(  # the Kafka side may reach into a room
        "from kafka.structs import TopicPartition\n"
        "from eaglefeed.consumers.generate.inference.servers import Server\n")
    assert violations(tmp_path) == []


@pytest.mark.parametrize("package", ["eaglefeed.schemas", "eaglefeed.dataset", "eaglefeed.producers",
                                     "eaglefeed.chat.conversation", "eaglefeed.core.tokenizer", *STAGES[1:],
                                     *ROOMS])
def test_all_lists_exactly_the_public_names(package):
    module = importlib.import_module(package)
    exported = set(module.__all__)
    assert all(hasattr(module, name) for name in exported)
    public = {n for n in vars(module) if not n.startswith("_")} - {"annotations"}
    submodules = {n for n in public if type(getattr(module, n)).__name__ == "module"}
    assert public - submodules == exported


def crowded(root: Path) -> list[str]:
    """Every folder of the namespace at ``root`` that holds more than ``MAX_MODULES`` modules directly."""
    count: dict[Path, int] = {}
    for path in _modules(root).values():
        count[path.parent] = count.get(path.parent, 0) + 1
    return [f"{folder.relative_to(root).as_posix()}/: {n} modules" for folder, n in sorted(count.items())
            if n > MAX_MODULES]


def test_no_folder_holds_more_than_twenty_modules():
    """A folder past twenty modules is a hall, not a room: group it by concern (quix-streams: 13 at most)."""
    wrong = crowded(ROOT)
    assert not wrong, "\n".join(wrong)


def test_a_crowded_folder_is_reported(tmp_path):
    folder = tmp_path / "consumers" / "generate"
    folder.mkdir(parents=True)
    (tmp_path / "eaglefeed").mkdir()
    for i in range(MAX_MODULES):
        (folder / f"m{i}.py").write_text("")
    assert crowded(tmp_path) == []
    (folder / "one_more.py").write_text("")
    assert crowded(tmp_path) == [f"consumers/generate/: {MAX_MODULES + 1} modules"]


def circles(root: Path) -> list[str]:
    """Every set of modules at ``root`` that import each other round (any import, lazy ones too)."""
    known = _modules(root)
    graph = {module: sorted({target for name, names, _level, _lazy in _all_imports(path)
                             if name.split(".")[0] == "eaglefeed"
                             for target in _target(name, names, known) if target in known} - {module})
             for module, path in known.items()}
    return [" <-> ".join(sorted(group)) for group in _strongly_connected(graph) if len(group) > 1]


def _strongly_connected(graph: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components of ``graph``, iteratively (no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph[nxt])))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    groups.append(group)
    return groups


def test_no_module_imports_itself_round_a_circle():
    """Module-level and function-level imports alike, within a wing or across wings."""
    found = circles(ROOT)
    assert not found, "\n".join(found)


def test_a_circle_inside_one_wing_is_reported(tmp_path):
    (tmp_path / "eaglefeed" / "core").mkdir(parents=True)
    core = tmp_path / "eaglefeed" / "core"
    (core / "a.py").write_text("from eaglefeed.core.b import B\n")
    (core / "b.py").write_text("from eaglefeed.core import c\n")
    (core / "c.py").write_text("def late():\n    import eaglefeed.core.a\n")
    (core / "d.py").write_text("from eaglefeed.core.a import A\n")  # reaches the circle, not part of it
    assert circles(tmp_path) == ["eaglefeed.core.a <-> eaglefeed.core.b <-> eaglefeed.core.c"]


def test_the_symlinks_join_the_design_card_folders():
    """producers/, consumers/ and schemas/ stay at the top and are eaglefeed.* through committed links."""
    for folder, name in JOINED.items():
        link = ROOT / "eaglefeed" / folder
        assert link.is_symlink() and link.resolve() == (ROOT / folder).resolve()
        assert Path(importlib.import_module(name).__file__).resolve().parent == (ROOT / folder).resolve()
