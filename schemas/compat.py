"""Avro schema compatibility: can a reader schema resolve everything a writer schema writes?

fastavro resolves records but has no checker, so this module states Avro's resolution rules
(the specification's "Schema Resolution") as a pure function over ``.avsc`` dicts:
names match (or a reader alias names the writer), a reader field missing from the writer has
a default, numeric promotions (int → long → float → double), string → bytes, enum symbols the
reader lacks need a reader default, fixed sizes match, arrays and maps by their items/values,
and unions branch by branch. ``check_history`` applies a compatibility mode to a list of
versions; eaglefeed's mode is ``BACKWARD_TRANSITIVE`` (docs/SCHEMAS.md says why).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
PROMOTIONS = {("int", "long"), ("int", "float"), ("int", "double"), ("long", "float"),
              ("long", "double"), ("float", "double"), ("string", "bytes")}
# The specification also promotes bytes to string; refused here, as bytes need not be UTF-8.
MODES = ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE")
MODE = "BACKWARD_TRANSITIVE"


def incompatibilities(reader: Any, writer: Any) -> list[str]:
    """Why ``reader`` cannot read what ``writer`` writes; empty when it can."""
    return _Resolver(reader, writer).check(reader, writer, "", "", "")


def check_history(versions: Sequence[Any], mode: str = MODE) -> list[str]:
    """Check each version against the earlier ones under ``mode``; returns the problems found.

    Raises:
        ValueError: ``mode`` is not one of ``MODES``.
    """
    if mode not in MODES:
        raise ValueError(f"unknown compatibility mode {mode!r}; one of {', '.join(MODES)}")
    problems = []
    for n in range(1, len(versions)):
        new = versions[n]
        older = range(n) if mode.endswith("_TRANSITIVE") else [n - 1]
        for o in older:
            pairs = []
            if mode.startswith(("BACKWARD", "FULL")):
                pairs.append((f"v{n + 1} reading v{o + 1}", new, versions[o]))
            if mode.startswith(("FORWARD", "FULL")):
                pairs.append((f"v{o + 1} reading v{n + 1}", versions[o], new))
            for label, reader, writer in pairs:
                problems += [f"{label}: {p}" for p in incompatibilities(reader, writer)]
    return problems


class _Resolver:
    """Named types of both schemas, so references by name resolve."""

    def __init__(self, reader: Any, writer: Any) -> None:
        self.reader_names: dict[str, Any] = {}
        self.writer_names: dict[str, Any] = {}
        _collect(reader, "", self.reader_names)
        _collect(writer, "", self.writer_names)
        self.seen: set[tuple[str, str]] = set()  # recursive types: a pair checked once

    def check(self, reader: Any, writer: Any, path: str, rns: str, wns: str) -> list[str]:
        reader, rns = _deref(reader, rns, self.reader_names)
        writer, wns = _deref(writer, wns, self.writer_names)
        if isinstance(writer, list):  # every branch the writer may choose must resolve
            return [p for branch in writer for p in self.check(reader, branch, path, rns, wns)]
        if isinstance(reader, list):  # the first reader branch that matches is used
            for branch in reader:
                if not self.check(branch, writer, path, rns, wns):
                    return []
            return [f"{path or 'top'}: no branch of the reader union reads writer type {_kind(writer)}"]
        rk, wk = _kind(reader), _kind(writer)
        if rk in PRIMITIVES or wk in PRIMITIVES:
            if rk == wk or (wk, rk) in PROMOTIONS:
                return []
            return [f"{path or 'top'}: writer {wk} cannot be read as {rk}"]
        if rk != wk:
            return [f"{path or 'top'}: writer {wk} cannot be read as {rk}"]
        if rk == "array":
            return self.check(reader["items"], writer["items"], f"{path}[]", rns, wns)
        if rk == "map":
            return self.check(reader["values"], writer["values"], f"{path}{{}}", rns, wns)
        return self._named(reader, writer, path, rns, wns)

    def _named(self, reader: Mapping[str, Any], writer: Mapping[str, Any], path: str, rns: str,
               wns: str) -> list[str]:
        rname, wname = _full(reader, rns), _full(writer, wns)
        aliases = {_full({"name": a}, _space(rname)) for a in reader.get("aliases", [])}
        where = path or rname
        if rname != wname and wname not in aliases:
            return [f"{where}: writer type {wname} does not match reader {rname} (nor its aliases)"]
        if reader["type"] == "fixed":
            return [] if reader["size"] == writer["size"] else [f"{where}: fixed size changed"]
        if reader["type"] == "enum":
            lost = [s for s in writer["symbols"] if s not in reader["symbols"]]
            if lost and "default" not in reader:
                return [f"{where}: enum symbols {lost} unknown to the reader, which has no default"]
            return []
        if (rname, wname) in self.seen:
            return []
        self.seen.add((rname, wname))
        written = {f["name"]: f for f in writer["fields"]}
        problems = []
        for field in reader["fields"]:
            names = [field["name"], *field.get("aliases", [])]
            match = next((written[n] for n in names if n in written), None)
            if match is None:
                if "default" not in field:
                    problems.append(f"{where}.{field['name']}: added without a default")
                continue
            problems += self.check(field["type"], match["type"], f"{where}.{field['name']}",
                                   _space(rname), _space(wname))
        return problems


def _kind(schema: Any) -> str:
    return schema if isinstance(schema, str) else str(schema["type"])


def _deref(schema: Any, ns: str, names: Mapping[str, Any]) -> tuple[Any, str]:
    """A type given by name becomes its definition; a ``{"type": "int"}`` becomes ``"int"``."""
    if isinstance(schema, str) and schema not in PRIMITIVES:
        full = schema if "." in schema else f"{ns}.{schema}" if ns else schema
        found = names.get(full, names.get(schema))
        if found is None:
            raise ValueError(f"unknown named type {schema!r}")
        return found, _space(_full(found, ns))
    if isinstance(schema, dict) and schema.get("type") in PRIMITIVES and len(schema) == 1:
        return schema["type"], ns
    if isinstance(schema, dict) and isinstance(schema.get("type"), (dict, list)):
        return _deref(schema["type"], ns, names)
    return schema, ns


def _collect(schema: Any, ns: str, names: dict[str, Any]) -> None:
    if isinstance(schema, list):
        for branch in schema:
            _collect(branch, ns, names)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in ("record", "error", "enum", "fixed"):
            full = _full(schema, ns)
            names[full] = schema
            ns = _space(full)
            for field in schema.get("fields", []):
                _collect(field["type"], ns, names)
        elif kind == "array":
            _collect(schema["items"], ns, names)
        elif kind == "map":
            _collect(schema["values"], ns, names)
        elif isinstance(kind, (dict, list)):
            _collect(kind, ns, names)


def _full(schema: Mapping[str, Any], ns: str) -> str:
    name = str(schema["name"])
    if "." in name:
        return name
    space = schema.get("namespace", ns)
    return f"{space}.{name}" if space else name


def _space(full: str) -> str:
    return full.rpartition(".")[0]
