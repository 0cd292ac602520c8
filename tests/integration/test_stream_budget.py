"""Streaming trainers and the hidden-states byte budget on a live pipeline (real broker, the stand-in).

The stand-in serves SGLang's aux hidden-states contract, so the worker captures states without
vLLM (tests/integration/test_capture_sglang.py). Trainer ranks are child processes
(``tests.integration.stream_trainer``); a killed rank is SIGKILLed and started again from the
checkpoint file it saved.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import eaglefeed
from eaglefeed.dataset import hidden_states, read_manifest
from eaglefeed.dataset.store import ObjectStore, StoreError, open_dataset, parse
from eaglefeed.dataset.streaming import shard_of
from eaglefeed.dataset.streaming.budget import read_budgets
from eaglefeed.dataset.streaming.usage import StatesMeter
from tests.cli import kafka_flags, run_cli, start_cli
from tests.integration.test_capture_sglang import CAPTURE, LAYERS, NO_CACHE, _env, _produce
from tests.running import wait_until

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]


def _worker(kafka, url: str, out: Path, log: Path, *flags: str) -> subprocess.Popen:
    return start_cli("generate", "--sglang-url", url, *kafka_flags(kafka), "--hidden-states",
                     ",".join(map(str, LAYERS)), "--hidden-states-dir", str(out / hidden_states.STORE),
                     "--exit-when-idle", "4", "--progress-seconds", "0", "--concurrency", "2", *flags,
                     log=log, env=_env())


def _sink(kafka, out: Path, log: Path) -> subprocess.Popen:
    return start_cli("sink", "--output", str(out), *kafka_flags(kafka), "--flush-seconds", "0.3",
                     "--exit-when-idle", "4", "--progress-seconds", "0", log=log, env=_env())


def _trainer(out: Path, tmp: Path, name: str, *flags: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.integration.stream_trainer", str(out),
                             "--out", str(tmp / f"{name}.ids"), "--checkpoint", str(tmp / f"{name}.ckpt"),
                             *flags], cwd=ROOT, env=_env(), stderr=open(tmp / f"{name}.log", "a"))


def _received(tmp: Path, name: str) -> list[str]:
    path = tmp / f"{name}.ids"
    return path.read_text().splitlines() if path.exists() else []


def _checkpointed(lines: list[str]) -> list[str]:
    """The ids a rank's last saved checkpoint holds (those before its last CHECKPOINT line)."""
    last = len(lines) - 1 - lines[::-1].index("CHECKPOINT") if "CHECKPOINT" in lines else 0
    return [line for line in lines[:last] if line not in ("CHECKPOINT", "END")]


def _ids(lines: list[str]) -> list[str]:
    return [line for line in lines if line not in ("CHECKPOINT", "END")]


class _Sampler:
    """The most bytes stored and not consumed, measured every 10 ms on a thread (a store: as it answers)."""

    def __init__(self, root: Path | None, store: ObjectStore | None = None) -> None:
        self.meter = StatesMeter(root, store=store)
        self.most = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.01):
            try:
                self.most = max(self.most, self.meter.measure().unconsumed_bytes)
            except (OSError, ValueError, StoreError):
                continue  # a record replaced while read


def _stop(sampler: _Sampler, *procs: subprocess.Popen | None) -> None:
    sampler.stop.set()
    for proc in procs:
        if proc is not None and proc.poll() is None:
            proc.kill()


def _rows(out: Path) -> int:
    return sum(seg["rows"] for event in read_manifest(out) for seg in event.get("added", ())
               if event.get("kind") == "flush")


def test_a_budget_pauses_the_workers_without_a_trainer_and_the_run_completes_once_one_consumes(
        kafka_config, standin_factory, tmp_path):
    url = standin_factory(*CAPTURE, *NO_CACHE)
    prompts = 24
    _produce(kafka_config, tmp_path, prompts)
    out = tmp_path / "dataset"
    budget = 150_000  # about 6 rows' states of the stand-in (20-30 kB each)
    sampler = _Sampler(out)
    started = time.monotonic()
    worker = _worker(kafka_config, url, out, tmp_path / "worker.log", "--hidden-states-budget", str(budget))
    sink = _sink(kafka_config, out, tmp_path / "sink.log")
    trainer = None
    try:
        wait_until(lambda: "fetching no prompts" in (tmp_path / "worker.log").read_text(), timeout=120,
                   what="the worker to pause at its budget")
        time.sleep(4)  # no trainer: the worker stays paused (and in its group), nothing is dropped
        assert worker.poll() is None and _rows(out) < prompts
        paused_rows = _rows(out)
        trainer = _trainer(out, tmp_path, "trainer", "--group", "draft", "--delete-states", "--every", "2")
        assert worker.wait(timeout=180) == 0, (tmp_path / "worker.log").read_text()[-3000:]
        assert sink.wait(timeout=60) == 0, (tmp_path / "sink.log").read_text()[-3000:]
        assert trainer.wait(timeout=60) == 0, (tmp_path / "trainer.log").read_text()[-3000:]
        elapsed = time.monotonic() - started
    finally:
        _stop(sampler, worker, sink, trainer)
    log = (tmp_path / "worker.log").read_text()
    assert log.count("fetching no prompts") >= 1 and "fetching prompts again" in log
    rows = eaglefeed.load(out)
    assert rows.num_rows == prompts and _rows(out) == prompts  # none dropped, none doubled
    assert sum(e.get("dead_lettered", 0) for e in read_manifest(out)) == 0
    sizes = [ref["bytes"] for ref in rows.column("hidden_states").to_pylist()]
    window = 4  # 2 x --concurrency 2
    assert sampler.most <= budget + window * max(sizes), (sampler.most, budget, max(sizes))
    assert sorted(_ids(_received(tmp_path, "trainer"))) == sorted(rows.column("id").to_pylist())
    print(f"\nbudget {budget} B = {budget / (sum(sizes) / len(sizes)):.1f} rows' worth; most stored and not "
          f"consumed {sampler.most} B ({(sampler.most - budget) / max(sizes):+.1f} rows' worth past it; "
          f"window {window}); rows {prompts} (paused at {paused_rows}); run {elapsed:.1f} s")


def test_two_ranks_split_every_row_a_killed_rank_resumes_exactly_and_a_second_group_gets_all(
        kafka_config, standin_factory, tmp_path):
    url = standin_factory(*CAPTURE, *NO_CACHE)
    prompts = 30
    _produce(kafka_config, tmp_path, prompts)
    out = tmp_path / "dataset"
    worker = _worker(kafka_config, url, out, tmp_path / "worker.log")
    sink = _sink(kafka_config, out, tmp_path / "sink.log")
    procs = [worker, sink]
    try:
        wait_until(lambda: (out / "manifest.jsonl").exists(), timeout=120, what="the first flush")
        rank0 = _trainer(out, tmp_path, "g-0", "--group", "g", "--rank", "0", "--world-size", "2")
        rank1 = _trainer(out, tmp_path, "g-1", "--group", "g", "--rank", "1", "--world-size", "2",
                         "--every", "3", "--delay", "0.2")
        procs += [rank0, rank1]
        wait_until(lambda: _received(tmp_path, "g-1").count("CHECKPOINT") >= 2
                   and _received(tmp_path, "g-1")[-1] != "CHECKPOINT", timeout=120,
                   what="rank 1 past its second checkpoint")
        os.kill(rank1.pid, signal.SIGKILL)
        rank1.wait()
        killed = _received(tmp_path, "g-1")
        (tmp_path / "g-1.ids").rename(tmp_path / "g-1-killed.ids")
        rank1 = _trainer(out, tmp_path, "g-1", "--group", "g", "--rank", "1", "--world-size", "2")
        procs.append(rank1)
        assert worker.wait(timeout=180) == 0, (tmp_path / "worker.log").read_text()[-3000:]
        assert sink.wait(timeout=60) == 0, (tmp_path / "sink.log").read_text()[-3000:]
        other = _trainer(out, tmp_path, "h", "--group", "h")
        procs.append(other)
        for proc, name in ((rank0, "g-0"), (rank1, "g-1"), (other, "h")):
            assert proc.wait(timeout=60) == 0, (tmp_path / f"{name}.log").read_text()[-3000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    every = sorted(eaglefeed.load(out).column("id").to_pylist())
    assert len(every) == prompts
    got0 = _ids(_received(tmp_path, "g-0"))
    got1 = _checkpointed(killed) + _ids(_received(tmp_path, "g-1"))
    assert len(got0) == len(set(got0)) and len(got1) == len(set(got1))  # no row twice
    assert sorted(got0 + got1) == every  # together: every row once
    assert all(shard_of(i, 2) == 0 for i in got0) and all(shard_of(i, 2) == 1 for i in got1)
    assert len(_ids(killed)) > len(_checkpointed(killed))  # it was killed past its checkpoint ...
    assert set(_ids(killed)) - set(_checkpointed(killed)) <= set(got1)  # ... and got those rows again
    assert sorted(_ids(_received(tmp_path, "h"))) == every  # a second group: everything again


def test_a_budget_on_a_dataset_in_the_store_holds_the_worker_until_a_trainer_on_another_host_consumes(
        kafka_config, standin_factory, s3_env, s3_uri, tmp_path):
    # Worker, sink and trainer each have a mirror of their own (three hosts sharing only the
    # store): the worker measures the store's hidden_states/ and the trainer's record, which the
    # trainer writes into the store; its --delete-states deletes the store's objects.
    url = standin_factory(*CAPTURE, *NO_CACHE)
    prompts = 16
    _produce(kafka_config, tmp_path, prompts)
    budget = 100_000  # about 4 rows' states of the stand-in

    def host(name: str) -> dict[str, str]:
        return _env() | s3_env | {"EAGLEFEED_MIRROR_DIR": str(tmp_path / f"mirror-{name}")}

    store = ObjectStore(parse(s3_uri))
    sampler = _Sampler(None, store=store)
    worker = start_cli("generate", "--sglang-url", url, *kafka_flags(kafka_config), "--hidden-states",
                       ",".join(map(str, LAYERS)), "--hidden-states-dir", f"{s3_uri}/hidden_states",
                       "--hidden-states-spool", str(tmp_path / "spool"),
                       "--hidden-states-budget", str(budget),
                       "--exit-when-idle", "6", "--progress-seconds", "0", "--concurrency", "2",
                       log=tmp_path / "worker.log", env=host("worker"))
    sink = start_cli("sink", "--output", s3_uri, *kafka_flags(kafka_config), "--flush-seconds", "0.3",
                     "--exit-when-idle", "6", "--progress-seconds", "0", log=tmp_path / "sink.log",
                     env=host("sink"))
    trainer = None
    try:
        wait_until(lambda: "fetching no prompts" in (tmp_path / "worker.log").read_text(), timeout=120,
                   what="the worker to pause at its budget")
        time.sleep(5)  # more than two measurements of the store: still paused, nothing dropped
        assert worker.poll() is None
        assert len(list(store.listing("hidden_states"))) < prompts
        budgets = read_budgets(None, store=store)
        assert [b.paused for b in budgets] == [True]
        # a fourth host: all it reads is in the store
        status = run_cli("status", "--once", "--interval", "0.2", *kafka_flags(kafka_config),
                         "--output", s3_uri, env=host("status"), timeout=60)
        assert status.returncode == 0, status.stderr[-3000:]
        assert "1 of 1 workers paused, waiting for trainers" in status.stdout, status.stdout
        assert "no trainer group subscribed" in status.stdout
        trainer = subprocess.Popen([sys.executable, "-m", "tests.integration.stream_trainer", s3_uri,
                                    "--out", str(tmp_path / "trainer.ids"), "--checkpoint",
                                    str(tmp_path / "trainer.ckpt"), "--group", "draft", "--delete-states",
                                    "--every", "2", "--idle-seconds", "12"],
                                   cwd=ROOT, env=host("trainer"), stderr=open(tmp_path / "trainer.log", "a"))
        assert worker.wait(timeout=240) == 0, (tmp_path / "worker.log").read_text()[-3000:]
        assert sink.wait(timeout=60) == 0, (tmp_path / "sink.log").read_text()[-3000:]
        assert trainer.wait(timeout=90) == 0, (tmp_path / "trainer.log").read_text()[-3000:]
    finally:
        _stop(sampler, worker, sink, trainer)
    log = (tmp_path / "worker.log").read_text()
    assert "fetching prompts again" in log
    rows = eaglefeed.load(s3_uri)
    ids = sorted(rows.column("id").to_pylist())
    assert len(ids) == prompts and sorted(_ids(_received(tmp_path, "trainer"))) == ids  # once each
    assert "wrote 16 rows" in (tmp_path / "sink.log").read_text()
    assert [obj.rel for obj in store.listing("consumers/draft")] == ["consumers/draft/rank-0-of-1.npz"]
    assert not list(store.listing("hidden_states"))  # every file consumed was deleted from the store
    sizes = [ref["bytes"] for ref in rows.column("hidden_states").to_pylist()]
    assert sampler.most <= budget + 4 * max(sizes), (sampler.most, budget, max(sizes))
    past = (sampler.most - budget) / max(sizes)
    print(f"\nin the store: budget {budget} B = {budget / (sum(sizes) / len(sizes)):.1f} rows' worth; most "
          f"stored and not consumed {sampler.most} B ({past:+.1f} of the largest past it); rows {prompts}")
    # the trainer's host kept no copies of the delivered rows' states
    assert not [p for p in (tmp_path / "mirror-trainer").rglob("*") if p.parent.name == "hidden_states"]
    assert StatesMeter(open_dataset(s3_uri), store=store).measure().unconsumed_bytes == 0
