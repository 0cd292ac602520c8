"""Schema evolution rules: every released version reads all earlier ones (BACKWARD_TRANSITIVE).

Why backward: readers decode by the writer fingerprint among the schemas they ship (there is
no registry), so an old process can never read a version released after it; what must hold is
that every new reader reads every record still on a topic, whatever version wrote it. The
checker (Avro's resolution rules) and an empirical round trip (records generated from each
older writer schema, read with the newer reader) must both agree.
"""

import copy
import io
import json
import shutil
from pathlib import Path

import fastavro
import pytest
from fastavro.utils import generate_many

from eaglefeed import schemas
from eaglefeed.schemas import codec_for, history
from eaglefeed.schemas.compat import MODE, check_history, incompatibilities
from eaglefeed.schemas.versions import RECORDS, load_history

HISTORY = Path(schemas.__file__).parent / "history"


def empirically_readable(reader, writer, count=30):
    """Records generated from ``writer`` all resolve into ``reader`` (fastavro's own resolution)."""
    w, r = fastavro.parse_schema(copy.deepcopy(writer)), fastavro.parse_schema(copy.deepcopy(reader))
    for record in generate_many(w, count):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, w, record)
        buf.seek(0)
        try:
            fastavro.schemaless_reader(buf, w, r)
        except Exception:  # noqa: BLE001 - any failure means not readable
            return False
    return True


def test_the_mode_is_backward_transitive():
    assert MODE == "BACKWARD_TRANSITIVE"


@pytest.mark.parametrize("record", RECORDS)
def test_every_version_reads_every_earlier_version(record):
    versions = history(record)
    assert check_history(versions) == []
    for n, reader in enumerate(versions):
        for writer in versions[:n]:
            assert empirically_readable(reader, writer)


@pytest.mark.parametrize("record", RECORDS)
def test_the_codec_writes_the_newest_version_and_reads_all(record):
    versions = history(record)
    codec = codec_for(record)
    assert codec.fingerprint == schemas.schema_fingerprint(versions[-1])
    for n in range(1, len(versions) + 1):
        old = codec_for(record, n)
        assert set(old._writers) <= set(codec._writers)  # the newest reads what any older one wrote


def test_record_names_never_change_across_versions():
    for record in RECORDS:
        assert len({f"{v['namespace']}.{v['name']}" for v in history(record)}) == 1


def breaking_edits():
    """A deliberately breaking v3 of GenerationRecord, one per rule."""
    newest = history("generation")[-1]

    def edit(change):
        schema = copy.deepcopy(newest)
        change(schema["fields"])
        return schema

    def field(fields, name):
        return next(f for f in fields if f["name"] == name)

    yield "added without a default", edit(lambda fs: fs.append({"name": "shard", "type": "int"}))
    yield "type narrowed", edit(lambda fs: field(fs, "created_at").update(type="int"))
    yield "string to int", edit(lambda fs: field(fs, "finish_reason").update(type="int"))
    yield "union branch lost", edit(lambda fs: field(fs, "matched_stop").update(type=["null", "long"]))
    yield "packed ids to array only", edit(
        lambda fs: field(fs, "prompt_ids").update(type={"type": "array", "items": "int"}))


@pytest.mark.parametrize("label,v3", list(breaking_edits()))
def test_a_breaking_new_version_fails_the_check(tmp_path, label, v3):
    folder = tmp_path / "generation"
    shutil.copytree(HISTORY / "generation", folder)
    (folder / f"v{len(history('generation')) + 1}.avsc").write_text(json.dumps(v3))
    versions = load_history(folder)
    problems = check_history(versions)
    assert problems, label
    assert not empirically_readable(v3, versions[-2], count=60)  # and fastavro agrees


def test_an_added_field_with_a_default_is_compatible(tmp_path):
    v3 = copy.deepcopy(history("generation")[-1])
    v3["fields"].append({"name": "turns", "type": "int", "default": 1})
    assert check_history([*history("generation"), v3]) == []


def record(fields, name="R", **extra):
    return {"type": "record", "name": name, "namespace": "t", "fields": fields, **extra}


@pytest.mark.parametrize("writer,reader,ok", [
    ("int", "long", True), ("int", "double", True), ("long", "int", False), ("float", "double", True),
    ("double", "float", False), ("string", "bytes", True), ("bytes", "string", False),
    ("boolean", "int", False), (["null", "int"], ["null", "long"], True), (["null", "int"], "int", False),
    ("int", ["null", "int"], True), ("string", ["null", "int"], False),
    ({"type": "array", "items": "int"}, {"type": "array", "items": "long"}, True),
    ({"type": "map", "values": "long"}, {"type": "map", "values": "int"}, False),
    ({"type": "enum", "name": "E", "symbols": ["A", "B"]},
     {"type": "enum", "name": "E", "symbols": ["A"]}, False),
    ({"type": "enum", "name": "E", "symbols": ["A", "B"]},
     {"type": "enum", "name": "E", "symbols": ["A", "Z"], "default": "Z"}, True),
    ({"type": "fixed", "name": "F", "size": 4}, {"type": "fixed", "name": "F", "size": 8}, False),
])
def test_field_type_rules_agree_with_fastavro(writer, reader, ok):
    w, r = record([{"name": "x", "type": writer}]), record([{"name": "x", "type": reader}])
    assert (incompatibilities(r, w) == []) is ok
    assert empirically_readable(r, w, count=40) is ok


def test_records_resolve_by_name_or_alias_and_named_references():
    inner = {"type": "record", "name": "P", "fields": [{"name": "a", "type": "int"}]}
    writer = record([{"name": "p", "type": inner}, {"name": "q", "type": "P"}])
    renamed = copy.deepcopy(writer)
    renamed["name"] = "S"
    assert incompatibilities(renamed, writer)  # a record renamed without an alias
    renamed["aliases"] = ["R"]
    assert incompatibilities(renamed, writer) == []
    narrowed = copy.deepcopy(writer)
    narrowed["fields"][0]["type"]["fields"][0]["type"] = "string"
    assert incompatibilities(narrowed, writer) == ["t.R.p.a: writer int cannot be read as string"]
    only_ref = record([{"name": "p", "type": inner}, {"name": "q", "type": "long"}])
    assert incompatibilities(only_ref, writer) == ["t.R.q: writer record cannot be read as long"]


def test_a_removed_field_is_backward_but_not_forward_compatible_without_a_default():
    v1 = record([{"name": "a", "type": "int"}, {"name": "b", "type": "int"}])
    v2 = record([{"name": "a", "type": "int"}])
    assert check_history([v1, v2], "BACKWARD") == []
    assert check_history([v1, v2], "FORWARD")
    v1["fields"][1]["default"] = 0
    assert check_history([v1, v2], "FULL_TRANSITIVE") == []


def test_a_gap_in_the_version_numbers_is_refused(tmp_path):
    shutil.copytree(HISTORY / "generation", tmp_path / "generation")
    gap = len(history("generation")) + 2
    (tmp_path / "generation" / f"v{gap}.avsc").write_text(json.dumps(history("generation")[-1]))
    with pytest.raises(ValueError, match="v1..vN"):
        load_history(tmp_path / "generation")
    with pytest.raises(ValueError):
        codec_for("generation", 99)
