"""Measure the eaglefeed modules one prompt crosses from its input line to its Parquet row.

Definition (what is counted, and when):

* One prompt (one JSONL line, one sample) runs through the three stages in this process, one
  stage after the other: ``run_producer`` → ``run_worker`` → ``run_sink``, on the in-memory Kafka
  of ``tests/fakes`` (every stage takes it as ``clients=``), the
  demo tokenizer, and a scripted SGLang ``/generate`` behind ``httpx.MockTransport``. Settings are
  the stages' defaults except what one prompt needs to get through at once (no vocabulary check,
  short commit/flush intervals, no settle, no watchdog, no progress line).
* A profile hook (``sys.setprofile`` and ``threading.setprofile``, so the worker's, the sink
  writer's and every other thread count) records the module of every Python function called
  (its ``__name__`` global) while the stage's *window* is open. Only ``eaglefeed.*`` modules are
  kept; the fakes, the libraries and the standard library are not. The caller of each call is
  counted too, so a loop entered before the window opened (the sink's ``_consume``) is seen
  as soon as it calls anything.
* A window opens when the prompt enters the stage, after start-up (settings, clients, metrics,
  topic checks, partition assignment):
  produce: the call of ``eaglefeed.producers.follow.input_stream`` (the line is read next);
  generate and sink: the first ``poll`` of the stage's consumer that returns the prompt's record.
  It closes when the stage's last durable act for the prompt returns:
  produce: the producer's ``flush`` once the prompts topic holds the record;
  generate: the commit of the prompts topic past the prompt's offset;
  sink: the commit of the generations topic past the record (the row is in a Parquet segment and
  in the manifest before it). The stage is then stopped; shut-down is not counted.
* Modules of ``eaglefeed.core`` are listed apart, once for the whole path (as a review did);
  every other module is listed under each stage that crossed it. Lines are ``wc -l`` of the file.

Run from the repository root: ``.venv/bin/python scripts/prompt_path.py`` (``--json`` for a machine
readable copy). Timing does not matter, so the figures are reproducible; a module reached only on a
timer (a progress line, a periodic status report) could appear in one run and not another, which is
why those timers are off.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tests.fakes

import httpx  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402

from eaglefeed.core.config import KafkaConfig, ProducerConfig, PromptSettings, SinkConfig, WorkerConfig  # noqa: E402
from eaglefeed.core.lifecycle import StopSignal  # noqa: E402
from eaglefeed.devtools.demo import TOKENIZER_DIR  # noqa: E402
from tests.fakes.kafka import FakeKafka  # noqa: E402

STAGES = ("produce", "generate", "sink")
LINE = {"messages": [{"role": "user", "content": "How far is the Moon?"}]}


class Recorder:
    """The profile hook: the eaglefeed modules that run code while a window is open, per stage."""

    def __init__(self) -> None:
        self.stage: str | None = None
        self.seen: dict[str, list[str]] = {s: [] for s in STAGES}  # in order of first call
        self._lock = threading.Lock()

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        stage = self.stage
        if stage is None or event != "call":
            return
        self._add(stage, frame)
        if frame.f_back is not None:  # the caller runs code in the window too (a loop already entered)
            self._add(stage, frame.f_back)

    def _add(self, stage: str, frame: FrameType) -> None:
        name = frame.f_globals.get("__name__", "")
        if not name.startswith("eaglefeed.") or name in self.seen[stage]:
            return
        with self._lock:
            if name not in self.seen[stage]:
                self.seen[stage].append(name)

    def open(self, stage: str) -> None:
        if self.stage is None and not self.seen[stage]:
            self.stage = stage

    def close(self) -> None:
        self.stage = None


@contextmanager
def profiling(recorder: Recorder) -> Iterator[None]:
    sys.setprofile(recorder)
    threading.setprofile(recorder)
    try:
        yield
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


def wrap(obj: Any, name: str, after: Callable[[Any], None]) -> None:
    """Replace ``obj.name`` by a call of it followed by ``after(result)``."""
    original = getattr(obj, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        after(result)
        return result

    setattr(obj, name, wrapped)


def committed_past(fake: FakeKafka, group: str, topic: str) -> bool:
    got = fake.committed(group, topic, 0)
    return got is not None and got.offset >= 1


def watch_consumer(fake: FakeKafka, recorder: Recorder, stage: str, topic: str, stop: StopSignal) -> None:
    """Open ``stage``'s window when its consumer first polls the record; close it at the commit past it."""
    make = fake.consumer

    def consumer(group_id: str, **settings: Any) -> Any:
        c = make(group_id, **settings)
        wrap(c, "poll", lambda batch: recorder.open(stage) if any(
            tp.topic == topic for tp in (batch or {})) else None)

        def committed(_: Any) -> None:
            if recorder.stage == stage and committed_past(fake, group_id, topic):
                recorder.close()
                stop.set()

        wrap(c, "commit", committed)
        return c

    fake.consumer = consumer  # type: ignore[method-assign]


def produce(fake: FakeKafka, kafka: KafkaConfig, recorder: Recorder, work: Path) -> None:
    from eaglefeed.producers import publisher

    source = work / "in.jsonl"
    source.write_text(json.dumps(LINE) + "\n")
    make = fake.producer

    def producer(*args: Any, **settings: Any) -> Any:
        p = make(*args, **settings)

        def flushed(_: Any) -> None:
            if recorder.stage == "produce" and fake.read(kafka.prompts_topic):
                recorder.close()

        wrap(p, "flush", flushed)
        return p

    stream = publisher.input_stream

    def input_stream(*args: Any, **kwargs: Any) -> Any:
        recorder.open("produce")
        return stream(*args, **kwargs)

    fake.producer = producer  # type: ignore[method-assign]
    publisher.input_stream = input_stream  # type: ignore[assignment]
    cfg = ProducerConfig(kafka=kafka, inputs=(str(source),), partitions=1,
                         prompts=PromptSettings(tokenizer=str(TOKENIZER_DIR)))
    summary = publisher.run_producer(cfg, registry=CollectorRegistry(), clients=fake)
    assert summary.published == 1, summary.describe()


def generate(fake: FakeKafka, kafka: KafkaConfig, recorder: Recorder) -> None:
    from eaglefeed.consumers.generate.loop import run_worker

    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/model_info":
            return httpx.Response(200, json={"model_path": "demo/model"})
        if request.url.path == "/server_info":
            return httpx.Response(200, json={"version": "0.5.0"})
        body = json.loads(request.content)
        ids = body["input_ids"]
        return httpx.Response(200, json={"text": "far", "output_ids": [7, 8, 2], "meta_info": {
            "id": body["rid"], "finish_reason": {"type": "stop", "matched": 2}, "prompt_tokens": len(ids),
            "completion_tokens": 3, "cached_tokens": 0, "e2e_latency": 0.01}})

    stop = StopSignal()
    watch_consumer(fake, recorder, "generate", kafka.prompts_topic, stop)
    cfg = WorkerConfig(kafka=kafka, sglang_urls=("http://sglang",), worker_id="w", check_vocab=False,
                       commit_interval=0.01, settle_seconds=0.0, stall_seconds=None)
    run_worker(cfg, stop=stop, registry=CollectorRegistry(), clients=fake, transport=httpx.MockTransport(answer))
    assert fake.read(kafka.generations_topic), "the worker published nothing"


def sink(fake: FakeKafka, kafka: KafkaConfig, recorder: Recorder, work: Path) -> None:
    from eaglefeed.consumers.sink.loop import run_sink

    stop = StopSignal()
    watch_consumer(fake, recorder, "sink", kafka.generations_topic, stop)
    cfg = SinkConfig(kafka=kafka, output=work / "dataset", flush_seconds=0.0, stall_seconds=None,
                     progress_seconds=0.0)
    summary = run_sink(cfg, stop=stop, registry=CollectorRegistry(), clients=fake)
    assert summary.rows_written == 1, summary


def measure() -> dict[str, list[str]]:
    """Run the prompt through the three stages; the modules each stage crossed."""
    fake = FakeKafka()
    kafka = KafkaConfig(topic_prefix="path")
    recorder = Recorder()
    with tempfile.TemporaryDirectory() as tmp, profiling(recorder):
        work = Path(tmp)
        produce(fake, kafka, recorder, work)
        generate(fake, kafka, recorder)
        sink(fake, kafka, recorder, work)
    for stage in STAGES:
        assert recorder.seen[stage], f"the {stage} window never opened"
    return recorder.seen


def lines(module: str) -> int:
    path = sys.modules[module].__file__
    assert path is not None
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def table(seen: dict[str, list[str]]) -> dict[str, Any]:
    """Per stage: the non-core modules (sorted) and their lines; the core modules once."""
    core = sorted({m for mods in seen.values() for m in mods if m.startswith("eaglefeed.core.")})
    out: dict[str, Any] = {}
    for stage in STAGES:
        mods = sorted(m for m in seen[stage] if not m.startswith("eaglefeed.core."))
        out[stage] = {m: lines(m) for m in mods}
    out["core"] = {m: lines(m) for m in core}
    return out


def report(result: dict[str, Any]) -> None:
    total_mods = total_lines = 0
    for part in (*STAGES, "core"):
        mods = result[part]
        size = sum(mods.values())
        print(f"\n{part}: {len(mods)} modules, {size:,} lines")
        for module, n in mods.items():
            print(f"  {n:5d}  {module}")
        if part != "core":
            total_mods += len(mods)
            total_lines += size
    distinct = {m: n for part in STAGES for m, n in result[part].items()}
    core = result["core"]
    print(f"\nstages: {total_mods} modules, {total_lines:,} lines "
          f"({len(distinct)} distinct, {sum(distinct.values()):,} lines); "
          f"core: {len(core)} modules, {sum(core.values()):,} lines")
    # A reader follows the path through the rooms' faces (STYLE.md §6): a package behind a face
    # (``__init__`` with ``__all__``, below a stage) is one stop, however many modules it holds.
    stops = {_face(m) for m in distinct}
    print(f"read through the package faces: {len(stops)} stops "
          f"({', '.join(sorted(s for s in stops if s not in distinct))} as one each)")


ROOMS = ("eaglefeed.consumers.generate.inference", "eaglefeed.consumers.generate.tokens")


def _face(module: str) -> str:
    return next((room for room in ROOMS if module.startswith(room + ".")), module)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    started = time.perf_counter()
    result = table(measure())
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        report(result)
        print(f"(measured in {time.perf_counter() - started:.1f}s)")


if __name__ == "__main__":
    main()
