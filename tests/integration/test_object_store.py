"""Datasets whose home is a real S3-compatible server (s3proxy from Maven jars), through local mirrors."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest

from eaglefeed.core.config import DEFAULT_STORE_GRACE_SECONDS
from eaglefeed.core.kafka import ensure_topics
from eaglefeed.dataset import manifest, shards
from eaglefeed.dataset.compact import CompactOptions, collect_garbage, compact
from eaglefeed.dataset.store import ObjectStore, StoreError, mirror_of, open_dataset, parse
from eaglefeed.dataset.store.mirror import Mirror, event_path
from eaglefeed.dataset.store.sync import pull
from eaglefeed.devtools import localstore
from eaglefeed.schemas.columnar import GenerationBatch
from tests.cli import kafka_flags, run_cli, start_cli
from tests.conftest import cache_dir, free_port
from tests.integration.test_sink_exactly_once import (
    PARTITIONS,
    Upstream,
    _dead_lettered_keys,
    _end_offsets,
    live_rows,
)
from tests.running import wait_until
from tests.unit.dataset.test_ids import gen

pytestmark = pytest.mark.kafka  # needs a server the session starts (the store, not the broker)


def commit(root: Path, first: int, count: int) -> dict:
    records = [gen(first + k) for k in range(count)]
    entry = shards.write_segment(root, shards.segment_name("g", 0, first, first + count - 1),
                                 shards.batch_to_table(GenerationBatch.from_records(records)))
    manifest.append_manifest(root, {"kind": "flush", "added": [entry],
                                    "offsets": {"gen:0": [first, first + count - 1]}})
    return entry


def row_count(root: Path) -> int:
    return sum(seg["rows"] for seg in manifest.live_segments(manifest.read_manifest(root)).values())


def test_commits_reach_the_store_and_a_second_mirror_reads_them(s3_env, s3_uri, tmp_path):
    root = open_dataset(s3_uri)
    assert mirror_of(root) is not None and str(root).startswith(str(tmp_path / "mirrors"))
    entries = [commit(root, 0, 5), commit(root, 5, 3)]
    store = ObjectStore(parse(s3_uri))
    assert list(store.paths("manifest")) == [event_path(1), event_path(2)]
    for entry in entries:  # each segment was uploaded before its event
        assert store.size(entry["path"]) == entry["bytes"]

    other = open_dataset(s3_uri, cache_dir=tmp_path / "elsewhere")  # another host's mirror
    assert other != root
    assert manifest.read_manifest(other) == manifest.read_manifest(root)
    assert row_count(other) == 8 and all((other / e["path"]).exists() for e in entries)
    assert manifest.resume_offsets(manifest.read_manifest(other)) == {"gen:0": 8}


def test_a_deleted_mirror_is_rebuilt_from_the_store(s3_env, s3_uri):
    root = open_dataset(s3_uri)
    commit(root, 0, 4)
    shutil.rmtree(root)
    root = open_dataset(s3_uri)
    assert row_count(root) == 4
    commit(root, 4, 2)  # appends go on after the events the store holds, not over them
    assert list(ObjectStore(parse(s3_uri)).paths("manifest")) == [event_path(1), event_path(2)]


def test_an_event_the_mirror_missed_is_pulled_not_lost(s3_env, s3_uri):
    # A writer killed after its put (the commit) and before its local append.
    root = open_dataset(s3_uri)
    commit(root, 0, 2)
    lines = (root / manifest.MANIFEST).read_bytes().splitlines(True)
    commit(root, 2, 2)
    (root / manifest.MANIFEST).write_bytes(b"".join(lines))
    mirror = mirror_of(root)
    assert isinstance(mirror, Mirror) and pull(mirror) == 1
    assert row_count(root) == 4


def test_a_dataset_begun_again_in_the_store_empties_the_mirror(s3_env, s3_uri):
    root = open_dataset(s3_uri)
    commit(root, 0, 3)
    store = ObjectStore(parse(s3_uri))
    for rel in list(store.paths("manifest")) + list(store.paths("segments")):
        store.delete(rel)  # `aws s3 rm --recursive`: the dataset is gone
    assert open_dataset(s3_uri) == root
    assert manifest.read_manifest(root) == [] and not list((root / "segments").glob("*.parquet"))


def test_a_conditional_put_the_store_refuses_stops_the_writer(s3_env, s3_uri):
    # s3proxy's filesystem backend does not honour If-None-Match; a store that does (S3, MinIO,
    # R2) answers 412 to a second writer of one event number, which must stop the writer.
    root = open_dataset(s3_uri)
    mirror = mirror_of(root)
    assert mirror is not None

    def refuse(rel, data, *, if_absent=False):
        from eaglefeed.dataset.store.client import ConditionFailedError
        raise ConditionFailedError(rel)

    mirror.store.put_bytes = refuse  # type: ignore[method-assign]
    with pytest.raises(manifest.ManifestError, match="committed by another writer"):
        commit(root, 0, 1)
    assert manifest.read_manifest(root) == []  # nothing committed locally either


def test_wrong_credentials_are_one_line(s3_env, s3_uri, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    with pytest.raises(StoreError) as caught:
        open_dataset(s3_uri)
    message = str(caught.value)
    assert "\n" not in message and s3_uri.split("/")[2] in message and "403" in message


def test_the_mirror_records_its_store(s3_env, s3_uri):
    root = open_dataset(s3_uri)
    assert json.loads((root / "remote.json").read_text()) == {"uri": s3_uri}


def start_sink_to_store(kafka, uri: str, env: dict[str, str], log: Path, crash_at: str | None):
    child = {k: v for k, v in os.environ.items() if not k.startswith("EAGLEFEED_")} | env
    if crash_at:
        child["EAGLEFEED_SINK_CRASH_AT"] = crash_at
    return start_cli("--log-level", "warning", "sink", "--output", uri, *kafka_flags(kafka),
                     "--group-instance-id", "sink-0", "--flush-rows", "23", "--flush-seconds", "0.3",
                     "--exit-when-idle", "2", log=log, append=True, env=child)


def test_sigkill_of_a_sink_writing_to_the_store_loses_and_doubles_nothing(kafka_config, s3_env, s3_uri,
                                                                          tmp_path):
    # The local suite's kill plan (tests/integration/test_sink_exactly_once.py) with the dataset's
    # home in the store, compaction beside the sink on the same host, and the mirror deleted
    # once mid-run (a sink host replaced): the store alone must hold the dataset, exactly once.
    seed = random.randrange(10**6)
    print(f"seed {seed}")
    kafka = kafka_config
    ensure_topics(kafka, {kafka.generations_topic: PARTITIONS, kafka.dead_letter_topic: 1})
    log = tmp_path / "sink.log"
    root = open_dataset(s3_uri)
    upstream = Upstream(kafka, seed)
    killer = random.Random(seed)
    plan = [(True, "after_dead_letter:1", 0, True), (False, "after_rename:2", 0, True),
            (True, "after_manifest:3", 0, True), (False, None, 1.5, False), (True, "after_commit:1", 0, True),
            (False, "after_rename:1", 0, False), (False, None, 2.0, False), (False, None, 0, False)]
    stop_compaction = threading.Event()
    compactions: list[int] = []
    errors: list[BaseException] = []

    def compact_beside_the_sink():
        try:
            while not stop_compaction.wait(0.3):
                if (root / manifest.MANIFEST).exists():
                    compactions.append(compact(root, CompactOptions(target_bytes=60_000)).shards)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    compactor = threading.Thread(target=compact_beside_the_sink)
    compactor.start()
    try:
        for run, (publish, crash_at, kill_after, must_die) in enumerate(plan):
            if publish:
                upstream.publish(first=run * 1000, count=120, redeliver=25)
            if run == 4:  # the host's mirror lost between two runs: the next sink starts from the store
                stop_compaction.set()
                compactor.join(timeout=60)
                shutil.rmtree(root)
                root = open_dataset(s3_uri)
                stop_compaction.clear()
                compactor = threading.Thread(target=compact_beside_the_sink)
                compactor.start()
            proc = start_sink_to_store(kafka, s3_uri, s3_env, log, crash_at)
            if kill_after:
                time.sleep(kill_after + killer.random())
                proc.send_signal(signal.SIGKILL)
            code = proc.wait(timeout=120)
            allowed = {-signal.SIGKILL} if must_die else {0, -signal.SIGKILL} if run < len(plan) - 1 else {0}
            assert code in allowed, f"run {run}: exit {code}\n" + log.read_text()[-3000:]
    finally:
        stop_compaction.set()
        compactor.join(timeout=60)
    assert not errors, errors
    assert sum(compactions) > 0, "compaction never ran beside the sink"

    elsewhere = open_dataset(s3_uri, cache_dir=tmp_path / "reader-host")  # read from the store alone
    compact(elsewhere, CompactOptions(target_bytes=60_000, include_partial=True, store_grace_seconds=0))
    rows = live_rows(elsewhere)
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), "a record was written twice"
    assert set(ids) == set(upstream.sent), "a record is missing"
    for row in rows:
        sent = upstream.sent[row["id"]]
        assert row["input_ids"] == sent["prompt_ids"] + sent["output_ids"]
    events = manifest.read_manifest(elsewhere)
    ends = {f"{kafka.generations_topic}:{p}": o for p, o in _end_offsets(kafka).items()}
    assert manifest.resume_offsets(events) == ends
    store = ObjectStore(parse(s3_uri))
    live = set(manifest.live_segments(events))
    shards_in_store = {rel for rel in store.paths("segments") if "shard-" in rel}
    assert live <= set(store.paths("segments")) and shards_in_store <= live  # gc ran in the store too
    assert _dead_lettered_keys(kafka, len(upstream.bad)) == set(upstream.bad)


def test_a_store_that_dies_mid_run_stops_the_sink_in_one_line_and_loses_nothing(kafka_config, tmp_path):
    # A store of its own (the session's keeps serving the other tests), SIGKILLed while the sink
    # writes into it; restarted, the same sink command finishes the dataset exactly once.
    kafka = kafka_config
    ensure_topics(kafka, {kafka.generations_topic: PARTITIONS, kafka.dead_letter_topic: 1})
    data_dir, port = tmp_path / "store", free_port()
    env = localstore.start(data_dir=data_dir, port=port, cache_dir=cache_dir()).environment()
    env["EAGLEFEED_MIRROR_DIR"] = str(tmp_path / "mirrors")
    uri, log = "s3://dies-mid-run/ds", tmp_path / "sink.log"
    upstream = Upstream(kafka, 11)
    upstream.publish(first=0, count=300, redeliver=0)
    try:
        proc = start_sink_to_store(kafka, uri, env, log, crash_at=None)
        wait_until(lambda: any((tmp_path / "mirrors").rglob("manifest.jsonl")), timeout=60,
                   what="the sink's first commit")
        os.kill(localstore.status(data_dir).pid, signal.SIGKILL)
        upstream.publish(first=1000, count=200, redeliver=20)  # the sink still has work when it fails
        code = proc.wait(timeout=180)
        text = log.read_text()
        errors = [line for line in text.splitlines() if "object store" in line]
        assert code == 1 and "Traceback" not in text, text[-3000:]
        assert len(errors) == 1 and "s3://dies-mid-run/ds/" in errors[0], text[-3000:]

        localstore.start(data_dir=data_dir, port=port, cache_dir=cache_dir())
        again = start_sink_to_store(kafka, uri, env, tmp_path / "again.log", crash_at=None)
        assert again.wait(timeout=180) == 0, (tmp_path / "again.log").read_text()[-3000:]
        with pytest.MonkeyPatch.context() as patch:
            for name, value in env.items():
                patch.setenv(name, value)
            rows = live_rows(open_dataset(uri, cache_dir=tmp_path / "reader"))
        ids = [r["id"] for r in rows]
        assert len(ids) == len(set(ids)) and set(ids) == set(upstream.sent)
    finally:
        localstore.stop(data_dir)


def test_hidden_states_go_to_the_store_and_the_rows_read_back_from_it(kafka_config, standin_factory, s3_env,
                                                                     s3_uri, tmp_path):
    # SGLang's path (the stand-in's labelled aux states): the worker writes each file into its
    # spool, checks it, uploads it with its sha256 and deletes it; the sink checks the store's copy;
    # a reader on another host gets the same arrays, and gc keeps every named file.
    from eaglefeed.dataset.collect import collect
    from tests.integration.test_capture_sglang import CAPTURE, LAYERS, NO_CACHE, _produce

    url = standin_factory(*CAPTURE, *NO_CACHE)
    _produce(kafka_config, tmp_path, 12)
    env = {k: v for k, v in os.environ.items() if not k.startswith("EAGLEFEED_")} | s3_env
    spool = tmp_path / "spool"
    worker = run_cli("generate", "--sglang-url", url, *kafka_flags(kafka_config),
                     "--hidden-states", ",".join(map(str, LAYERS)), "--hidden-states-dir",
                     f"{s3_uri}/hidden_states", "--hidden-states-spool", str(spool),
                     "--exit-when-idle", "3", "--progress-seconds", "0", timeout=240, env=env)
    assert worker.returncode == 0, worker.stderr[-3000:]
    assert not list(spool.iterdir())  # every checked file went to the store
    store = ObjectStore(parse(s3_uri))
    uploaded = {obj.rel: obj for obj in store.listing("hidden_states")}
    assert len(uploaded) == 12

    sink = run_cli("sink", "--output", s3_uri, *kafka_flags(kafka_config), "--flush-seconds", "0.3",
                   "--exit-when-idle", "3", "--progress-seconds", "0", timeout=240, env=env)
    assert sink.returncode == 0 and "wrote 12 rows" in sink.stdout, sink.stdout + sink.stderr[-3000:]

    import eaglefeed
    from eaglefeed.dataset import hidden_states

    rows = eaglefeed.load(s3_uri, hidden_states=True)  # the reader's mirror holds no states yet
    assert len(rows) == 12
    for row in rows:
        ref = row["hidden_states"].ref
        stored = store.head(ref.uri)
        assert stored is not None and stored.sha256 == ref.sha256 and stored.size == ref.bytes
        assert row["hidden_states"].float32().shape == tuple(ref.shape)  # downloaded on opening
        assert hidden_states.sha256_of(open_dataset(s3_uri) / ref.uri) == ref.sha256
    summary = collect(open_dataset(s3_uri), grace_seconds=0)
    assert summary.referenced == 12 and summary.deleted == 0 and summary.missing == 0


def test_the_sink_stops_on_a_row_whose_states_the_store_lacks(kafka_config, standin_factory, s3_env, s3_uri,
                                                              tmp_path):
    from tests.integration.test_capture_sglang import CAPTURE, LAYERS, NO_CACHE, _produce

    url = standin_factory(*CAPTURE, *NO_CACHE)
    _produce(kafka_config, tmp_path, 4)
    env = {k: v for k, v in os.environ.items() if not k.startswith("EAGLEFEED_")} | s3_env
    worker = run_cli("generate", "--sglang-url", url, *kafka_flags(kafka_config),
                     "--hidden-states", ",".join(map(str, LAYERS)), "--hidden-states-dir",
                     f"{s3_uri}/hidden_states", "--exit-when-idle", "3", "--progress-seconds", "0",
                     timeout=240, env=env)
    assert worker.returncode == 0, worker.stderr[-3000:]
    store = ObjectStore(parse(s3_uri))
    victim = next(iter(store.paths("hidden_states")))
    store.delete(victim)
    sink = run_cli("sink", "--output", s3_uri, *kafka_flags(kafka_config), "--flush-seconds", "0.3",
                   "--exit-when-idle", "3", "--progress-seconds", "0", timeout=240, env=env)
    assert sink.returncode != 0, sink.stdout + sink.stderr[-3000:]
    assert f"{victim} is missing from {s3_uri}/hidden_states" in sink.stderr, sink.stderr[-3000:]


def test_a_full_bucket_stops_the_sink_in_one_line_and_freeing_it_finishes_the_dataset(kafka_config, tmp_path):
    # A quota, as a small filesystem under the store's objects (the suite runs as root here; where
    # mounting is refused the test skips): the sink's put fails, it stops naming the object and
    # the store's answer, and once space is freed the same command writes every row once.
    import subprocess

    data_dir, port = tmp_path / "store", free_port()
    objects = data_dir / "objects"
    objects.mkdir(parents=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(objects)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()})")
    kafka = kafka_config
    ensure_topics(kafka, {kafka.generations_topic: PARTITIONS, kafka.dead_letter_topic: 1})
    try:
        env = localstore.start(data_dir=data_dir, port=port, cache_dir=cache_dir()).environment()
        env["EAGLEFEED_MIRROR_DIR"] = str(tmp_path / "mirrors")
        uri = "s3://full-bucket/ds"
        with pytest.MonkeyPatch.context() as patch:
            for name, value in env.items():
                patch.setenv(name, value)
            filler = ObjectStore(parse("s3://full-bucket"))
            filler.ensure_bucket()
            (tmp_path / "filler").write_bytes(os.urandom(1_700_000))
            filler.put_file("filler", tmp_path / "filler")
        upstream = Upstream(kafka, 5)
        upstream.publish(first=0, count=600, redeliver=0)
        log = tmp_path / "sink.log"
        code = start_sink_to_store(kafka, uri, env, log, crash_at=None).wait(timeout=180)
        text = log.read_text()
        errors = [line for line in text.splitlines() if "object store" in line]
        assert code == 1 and "Traceback" not in text, text[-3000:]
        assert len(errors) == 1 and "s3://full-bucket/ds/" in errors[0], text[-3000:]

        with pytest.MonkeyPatch.context() as patch:
            for name, value in env.items():
                patch.setenv(name, value)
            filler.delete("filler")
            again = start_sink_to_store(kafka, uri, env, tmp_path / "again.log", crash_at=None)
            assert again.wait(timeout=180) == 0, (tmp_path / "again.log").read_text()[-3000:]
            rows = live_rows(open_dataset(uri, cache_dir=tmp_path / "reader"))
        ids = [r["id"] for r in rows]
        assert len(ids) == len(set(ids)) and set(ids) == set(upstream.sent)
    finally:
        localstore.stop(data_dir)
        subprocess.run(["umount", "-l", str(objects)], check=False)


def test_kills_of_worker_sink_and_store_with_states_in_the_store_lose_and_double_nothing(
        kafka_config, standin_factory, tmp_path):
    # Every process of a run whose dataset and hidden states live in the store, SIGKILLed once
    # mid-run and started again: every prompt ends as one row whose states are in the store and
    # match their sha256, and gc leaves no file that no row names.
    from eaglefeed.dataset import hidden_states
    from eaglefeed.dataset.collect import collect
    from tests.integration.test_capture_sglang import CAPTURE, LAYERS, NO_CACHE, _produce

    prompts = 60
    data_dir, port = tmp_path / "store", free_port()
    env = localstore.start(data_dir=data_dir, port=port, cache_dir=cache_dir()).environment()
    env["EAGLEFEED_MIRROR_DIR"] = str(tmp_path / "mirrors")
    child = {k: v for k, v in os.environ.items() if not k.startswith("EAGLEFEED_")} | env
    uri = "s3://kills-everywhere/ds"
    url = standin_factory(*CAPTURE, *NO_CACHE, "--latency-model", "batching", "--decode-step-ms", "12")
    _produce(kafka_config, tmp_path, prompts)
    worker_flags = ("generate", "--sglang-url", url, *kafka_flags(kafka_config), "--hidden-states",
                    ",".join(map(str, LAYERS)), "--hidden-states-dir", f"{uri}/hidden_states",
                    "--hidden-states-spool", str(tmp_path / "spool"), "--concurrency", "4",
                    "--exit-when-idle", "4", "--progress-seconds", "0")
    sink_flags = ("sink", "--output", uri, *kafka_flags(kafka_config), "--flush-rows", "7",
                  "--flush-seconds", "0.3", "--exit-when-idle", "6", "--progress-seconds", "0")
    logs = tmp_path / "logs"
    logs.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        store = ObjectStore(parse(uri))
        store.ensure_bucket()

    def uploaded() -> int:
        return sum(1 for _ in store.paths("hidden_states"))

    try:
        worker = start_cli(*worker_flags, log=logs / "worker.log", append=True, env=child)
        sink = start_cli(*sink_flags, log=logs / "sink.log", append=True, env=child)
        wait_until(lambda: uploaded() >= 10, timeout=120, what="the first states in the store")
        worker.send_signal(signal.SIGKILL)
        sink.send_signal(signal.SIGKILL)
        worker.wait(), sink.wait()
        before = uploaded()
        assert before < prompts, "the run ended before the kills"
        worker = start_cli(*worker_flags, log=logs / "worker.log", append=True, env=child)
        sink = start_cli(*sink_flags, log=logs / "sink.log", append=True, env=child)
        wait_until(lambda: uploaded() >= before + 8, timeout=120, what="the restarted worker's uploads")
        os.kill(localstore.status(data_dir).pid, signal.SIGKILL)  # the store, under both of them
        time.sleep(1)
        localstore.start(data_dir=data_dir, port=port, cache_dir=cache_dir())
        for proc in (worker, sink):
            proc.wait(timeout=240)
        for name in ("worker", "sink"):  # each stopped on the store's death in one line, if at all
            assert "Traceback" not in (logs / f"{name}.log").read_text(), (logs / f"{name}.log").read_text()
        # What failed on the store's death stopped; the same commands finish the run.
        for flags, name in ((worker_flags, "worker"), (sink_flags, "sink")):
            done = start_cli(*flags, log=logs / f"{name}.log", append=True, env=child).wait(timeout=240)
            assert done == 0, (logs / f"{name}.log").read_text()[-3000:]
        with pytest.MonkeyPatch.context() as patch:
            for name, value in env.items():
                patch.setenv(name, value)
            root = open_dataset(uri, cache_dir=tmp_path / "reader")
            rows = live_rows(root)
            prompt_ids = [r["id"].split(":")[0] for r in rows]
            assert len(prompt_ids) == len(set(prompt_ids)) == prompts
            import eaglefeed

            for row in eaglefeed.load(uri, hidden_states=True):
                ref = row["hidden_states"].ref
                assert hidden_states.problem(root, ref) is None  # in the store, sha256 as recorded
                check = tmp_path / "check" / ref.uri  # download keeps a file already in place
                assert store.download(ref.uri, check) and hidden_states.sha256_of(check) == ref.sha256
            collect(root, grace_seconds=0)
            named = {row["hidden_states"].ref.uri for row in eaglefeed.load(uri, hidden_states=True)}
            assert set(store.paths("hidden_states")) == named  # 0 orphans after gc
    finally:
        localstore.stop(data_dir)


def test_a_torn_mirror_line_is_cut_before_a_pull_appends(s3_env, s3_uri):
    # A sink whose disk filled during its local append, after its put (the commit): the mirror
    # holds half a line. The next open must cut it, not glue the store's event onto it.
    root = open_dataset(s3_uri)
    commit(root, 0, 2)
    whole = (root / manifest.MANIFEST).read_bytes()
    commit(root, 2, 2)
    second = (root / manifest.MANIFEST).read_bytes()[len(whole):]
    (root / manifest.MANIFEST).write_bytes(whole + second[:len(second) // 2])
    assert pull(mirror_of(root)) == 1
    assert row_count(root) == 4 and len(manifest.read_manifest(root)) == 2


def test_a_commit_the_mirror_missed_stops_the_next_writer_instead_of_overwriting_it(s3_env, s3_uri):
    # A sibling writer of this host killed after its put and before its local line: the next
    # writer must not take the same event number (s3proxy would let it overwrite the commit).
    root = open_dataset(s3_uri)
    commit(root, 0, 2)
    lines = (root / manifest.MANIFEST).read_bytes()
    commit(root, 2, 2)
    (root / manifest.MANIFEST).write_bytes(lines)  # the sibling's local append never happened
    with pytest.raises(manifest.ManifestError, match="has not read"):
        commit(root, 4, 2)
    store = ObjectStore(parse(s3_uri))
    assert list(store.paths("manifest")) == [event_path(1), event_path(2)]
    assert open_dataset(s3_uri) == root and row_count(root) == 4  # the next start reads it
    commit(root, 4, 2)
    assert row_count(root) == 6


def test_a_retried_conditional_put_of_our_own_event_is_our_commit(s3_env, s3_uri):
    # boto3 resends a put whose answer was lost; a store honouring If-None-Match answers 412 to the
    # resend of what it already holds: that is this writer's commit, not another writer's.
    from eaglefeed.dataset.store.client import ConditionFailedError

    root = open_dataset(s3_uri)
    mirror = mirror_of(root)
    real = mirror.store.put_bytes

    def lost_answer(rel, data, *, if_absent=False):
        real(rel, data, if_absent=if_absent)
        raise ConditionFailedError(rel)

    mirror.store.put_bytes = lost_answer  # type: ignore[method-assign]
    commit(root, 0, 3)
    assert row_count(root) == 3 and len(list(ObjectStore(parse(s3_uri)).paths("manifest"))) == 1


def test_processes_fetching_one_file_at_once_each_get_it_whole(s3_env, s3_uri, tmp_path):
    import concurrent.futures

    store = ObjectStore(parse(s3_uri))
    store.ensure_bucket()
    (tmp_path / "big").write_bytes(os.urandom(3_000_000))
    store.put_file("segments/big", tmp_path / "big")
    dest = tmp_path / "mirror" / "segments" / "big"
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        assert all(pool.map(lambda _: store.download("segments/big", dest), range(6)))
    assert dest.read_bytes() == (tmp_path / "big").read_bytes()
    assert not [p for p in dest.parent.iterdir() if p.name.endswith(".download")]


def test_a_segment_uploaded_by_a_commit_that_failed_is_removed_from_the_store_with_its_sidecar(
        s3_env, s3_uri):
    # A commit uploads its files, then puts its event: a store failing in between left the files in
    # the store for good (only the mirror's copies were discarded when the partition was next opened).
    root = open_dataset(s3_uri)
    kept = commit(root, 0, 5)
    store = ObjectStore(parse(s3_uri))
    orphans = []
    for partition in (0, 1):
        name = shards.segment_name("g", partition, 5, 7)
        entry = shards.write_segment(root, name, shards.batch_to_table(GenerationBatch.from_records(
            [gen(100 + partition * 10 + k) for k in range(3)])))
        sidecar = f"freq/{name.removesuffix('.parquet')}.npz"
        (root / sidecar).parent.mkdir(exist_ok=True)
        (root / sidecar).write_bytes(b"counts")
        for rel in (entry["path"], sidecar):
            store.put_file(rel, root / rel)
        orphans.append((entry["path"], sidecar))
    added = manifest.ever_added(manifest.read_manifest(root))
    removed = shards.discard_uncommitted(root, added, shards.segment_prefix("g", 0))
    assert sorted(removed) == sorted(orphans[0])
    in_store = set(store.paths("segments")) | set(store.paths("freq"))
    assert not in_store & set(orphans[0])  # gone from the store, not only from the mirror
    assert kept["path"] in in_store and set(orphans[1]) <= in_store  # another partition's: its owner's
    assert not (root / orphans[0][0]).exists() and (root / orphans[1][0]).exists()


def test_the_store_keeps_a_file_compacted_away_for_the_grace_then_deletes_it(s3_env, s3_uri):
    # A reader on another host holds no lock of this one: deleting the store's copy of a segment
    # the moment a compaction replaced it would pull it from under that reader's snapshot.
    root = open_dataset(s3_uri)
    sources = [commit(root, first, 4)["path"] for first in (0, 4, 8)]
    store = ObjectStore(parse(s3_uri))
    summary = compact(root, CompactOptions(target_bytes=10**9, include_partial=True))
    assert summary.shards == 1 and row_count(root) == 12
    assert not any((root / rel).exists() for rel in sources)  # the mirror's copies go at once
    assert set(sources) <= set(store.paths("segments"))  # the store's stay, for other hosts' readers
    assert collect_garbage(root) == 0
    later = time.time() + DEFAULT_STORE_GRACE_SECONDS + 1
    assert collect_garbage(root, now=later) == len(sources)
    left = set(store.paths("segments"))
    assert not left & set(sources) and set(manifest.live_segments(manifest.read_manifest(root))) <= left
