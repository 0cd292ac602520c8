"""One scenario's pipeline: stand-ins, producer, workers and sink as real processes, fed and faulted.

:class:`Pipeline` starts everything on a fresh topic prefix of the run's broker, appends prompt
lines to the producer's input file over ``feed_seconds`` (the producer follows the file), lets
the scenario kill, restart and fault things, then waits until every input is settled, stops the
processes cleanly and draws up the books. A process that dies on its own fails the scenario.
"""

from __future__ import annotations

import logging
import random
import re
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx
from kafka.errors import KafkaError

from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.kafka import ensure_topics, pipeline_topics
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.devtools.launcher import StandinProcess
from eaglefeed.devtools.startup import wait_healthy
from reliability import inputs
from reliability.broker import Broker
from reliability.inject import inject_garbage
from reliability.ledger import Books, Expected, Outcome, generation_copies
from reliability.monitor import Fault, Monitor
from reliability.procs import Proc

log = logging.getLogger(__name__)

PARTITIONS = 6
STANDIN_FLAGS = ("--decode-step-ms", "2", "--output-len-mean", "32", "--max-running-requests", "64")
WORKER_FLAGS = ("--concurrency", "64", "--request-timeout", "5", "--retry-backoff", "0.05",
                "--retry-backoff-max", "1", "--probe-interval", "0.5", "--commit-interval", "0.5",
                "--drain-seconds", "5", "--session-timeout", "6")
SINK_FLAGS = ("--flush-seconds", "1", "--flush-rows", "2000")
PRODUCER_FLAGS = ("--tokenizer", str(TOKENIZER_DIR), "--follow", "--workers", "0", "--poll-interval", "0.5",
                  "--max-new-tokens", "64")
CAPTURE_STANDIN_FLAGS = ("--enable-return-aux-hidden-states", "--speculative-algorithm", "EAGLE3",
                         "--prefix-cache-block-size", "0")
"""SGLang's aux hidden states, whole: its prefix cache off (the stand-in's 8 layers give [2, 4, 5])."""
CAPTURE_LAYERS = "2,4,5"
STARTUP_SECONDS = 10.0  # a process is up at least this long before the clean stop that ends a scenario


_FAULT_LINE = re.compile(r'^eaglefeed_standin_faults_injected_total\{kind="([^"]+)"\} ([0-9.e+]+)$', re.M)


class ScenarioFailure(Exception):
    """A process died on its own, or the scenario could not go on."""


@dataclass(frozen=True)
class Shape:
    """What a scenario runs: its inputs, its processes and the flags that differ from the defaults."""

    prompts: int
    samples: int = 1
    workers: int = 2
    sinks: int = 1
    sink_flags: tuple[str, ...] = ()
    worker_flags: tuple[str, ...] = ()
    standins: int = 1
    standin_flags: tuple[str, ...] = ()
    feed_seconds: float = 10.0
    hostile_lines: int = 0
    garbage_prompts: int = 0
    garbage_generations: int = 0
    timeout: float = 300.0
    seed: int = 0
    conversations: int = 0  # multi-turn lines fed (over ``feed_seconds``) to a second, rerender producer
    converse_flags: tuple[str, ...] = ()
    supervised: bool = False  # a process that exits on its own is started again (and noted), not a failure
    capture: bool = False  # every row also carries its hidden states (SGLang's aux contract on the stand-ins)


@dataclass
class Finished:
    """What :meth:`Pipeline.finish` found."""

    outcome: Outcome
    faults: list[Fault]
    errors: list[str]
    seconds: float
    monitor: Monitor
    notes: list[str]


class Pipeline:
    """Run one scenario's pipeline on ``broker``; use as a context manager.

    Args:
        name: the scenario name (also the folder name under ``root``).
        shape: inputs, processes and flags.
        broker: the run's broker.
        root: where inputs, logs and the dataset go.
    """

    def __init__(self, *, name: str, shape: Shape, broker: Broker, root: Path) -> None:
        self.name = name
        self.shape = shape
        self.broker = broker
        self.dir = root / name
        self.rng = random.Random(shape.seed)
        prefix = f"rel-{name}-{uuid.uuid4().hex[:6]}"
        self.kafka = KafkaConfig(bootstrap_servers=broker.bootstrap, topic_prefix=prefix)
        self.dataset = self.dir / "dataset"
        self.input = self.dir / "inputs" / "prompts.jsonl"
        self.conversation_input = self.dir / "inputs" / "conversations.jsonl"
        self.expected = Expected(samples=shape.samples)
        if shape.conversations:
            self.expected.conversation_sources.add(str(self.conversation_input))
        self.exits: list[tuple[float, str, int, str]] = []  # supervised: (when, process, code, last log line)
        self.procs: dict[str, Proc] = {}
        self.standin_urls: list[str] = []
        self.faults: list[Fault] = []
        self.errors: list[str] = []
        self._fed = 0  # good prompt lines appended so far
        self._conversations_fed = 0
        self._next_line = 1
        self._feed_started = 0.0
        groups = {"generate": (f"{prefix}-generate", self.kafka.prompts_topic),
                  "sink": (f"{prefix}-sink", self.kafka.generations_topic)}
        if shape.conversations:
            groups["converse"] = (f"{prefix}-converse", self.kafka.generations_topic)
        self.monitor = Monitor(kafka=self.kafka, pids=self._pids, groups=groups)

    # --- setting up -------------------------------------------------------------------
    def __enter__(self) -> Pipeline:
        (self.dir / "logs").mkdir(parents=True, exist_ok=True)
        self.input.parent.mkdir(parents=True, exist_ok=True)
        self.input.touch()
        if self.shape.conversations:
            self.conversation_input.touch()
        if self.shape.hostile_lines:
            self._append(inputs.hostile_lines(self._next_line, self.shape.hostile_lines, self.shape.seed))
        ensure_topics(self.kafka, pipeline_topics(self.kafka, PARTITIONS))
        try:
            self._start_processes()
            inject_garbage(self.kafka, self.expected, prompts=self.shape.garbage_prompts,
                           generations=self.shape.garbage_generations, seed=self.shape.seed,
                           partitions=PARTITIONS)
            self.monitor.start()
            self._feed_started = time.monotonic()
            self.tick()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_exc: object) -> None:
        for proc in self.procs.values():
            proc.kill()
        self.monitor.stop()

    def _start_processes(self) -> None:
        common = ["--bootstrap-servers", self.kafka.bootstrap_servers,
                  "--topic-prefix", self.kafka.topic_prefix]
        logs = self.dir / "logs"
        for i in range(self.shape.standins):
            capture = CAPTURE_STANDIN_FLAGS if self.shape.capture else ()
            standin = StandinProcess(flags=("--random-seed", str(i), *STANDIN_FLAGS, *capture,
                                            *self.shape.standin_flags,
                                            "--fault-seed", str(self.shape.seed * 100 + i)))
            self.standin_urls.append(standin.url)
            self._add(Proc(name=f"sglang-{i}", logs=logs, args=standin.args))
        for i in range(self.shape.standins):
            self._wait_standin(i)
        prefix = self.kafka.topic_prefix
        for i in range(self.shape.sinks):
            self._add(Proc(name="sink" if i == 0 else f"sink-{i}", logs=logs, args=[
                "sink", "--output", str(self.dataset), "--group-id", f"{prefix}-sink", *SINK_FLAGS,
                *self.shape.sink_flags, *common]))
        urls = [arg for url in self.standin_urls for arg in ("--sglang-url", url)]
        capture_flags = ["--hidden-states", CAPTURE_LAYERS, "--hidden-states-dir",
                         str(self.dataset / "hidden_states")] if self.shape.capture else []
        for i in range(self.shape.workers):
            self._add(Proc(name=f"worker-{i}", logs=logs, args=[
                "generate", *urls, "--group-id", f"{prefix}-generate", "--worker-id", f"w{i}",
                *WORKER_FLAGS, *capture_flags, *self.shape.worker_flags, *common]))
        if self.shape.conversations:
            # Multi-turn lines go through a producer of their own (--history is per producer):
            # it publishes each conversation's first prompt, converse every later one.
            self._add(Proc(name="converse", logs=logs, args=[
                "converse", "--group-id", f"{prefix}-converse", *self.shape.converse_flags, *common]))
            self._add(Proc(name="producer-conv", logs=logs, args=[
                "produce", str(self.conversation_input), "--state-dir", str(self.dir / "producer-conv-state"),
                "--history", "rerender", "--max-turns", str(inputs.CONVERSATION_TURNS),
                "--partitions", str(PARTITIONS), *PRODUCER_FLAGS, *common]))
        # Injected garbage prompts carry a tokenizer of their own: this prefix is mixed on purpose.
        mixed = ["--allow-mixed"] if self.shape.garbage_prompts else []
        self._add(Proc(name="producer", logs=logs, args=[
            "produce", str(self.input), "--state-dir", str(self.dir / "producer-state"),
            "--samples", str(self.shape.samples), "--partitions", str(PARTITIONS), *PRODUCER_FLAGS,
            *mixed, *common]))

    def _wait_standin(self, i: int) -> None:
        """Wait until stand-in ``i`` (process ``sglang-i``, perhaps started again) answers /health."""
        proc = self.procs[f"sglang-{i}"]
        wait_healthy(self.standin_urls[i], process=proc.popen, log=proc.log)

    def _add(self, proc: Proc) -> None:
        self.procs[proc.name] = proc.start()

    # --- running ----------------------------------------------------------------------
    def tick(self) -> None:
        """Append the prompt lines that are due, and fail if a process died on its own.

        Raises:
            ScenarioFailure: a process exited without being asked to.
        """
        share = min(1.0, (time.monotonic() - self._feed_started) / max(self.shape.feed_seconds, 0.001))
        due = round(share * self.shape.prompts) - self._fed
        if due > 0:
            first = self._next_line
            self._append([inputs.good_line(n, self.kafka.topic_prefix) for n in range(first, first + due)])
            self._fed += due
        due = round(share * self.shape.conversations) - self._conversations_fed
        if due > 0:
            first = self._conversations_fed + 1
            lines = [inputs.conversation_line(n, self.kafka.topic_prefix) for n in range(first, first + due)]
            self.expected.add_conversations(self.conversation_input, first, lines)
            inputs.write_lines(self.conversation_input, lines)
            self._conversations_fed += due
        for proc in self.procs.values():
            code = proc.crashed()
            if code is None:
                continue
            if not self.shape.supervised:
                raise ScenarioFailure(f"{proc.name} exited with code {code} on its own:\n{proc.tail()}")
            # As a supervisor (systemd, Kubernetes) would: note why it went, start it again.
            last = next((line for line in reversed(proc.tail(40).splitlines()) if line.strip()), "")
            self.exits.append((time.monotonic(), proc.name, code, last))
            log.warning("%s: %s exited with %d on its own (%s); started again",
                        self.name, proc.name, code, last)
            proc.start()

    def wait(self, seconds: float) -> None:
        """Keep feeding and watching for ``seconds``."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.tick()
            time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))

    @property
    def feeding(self) -> bool:
        """Whether prompt lines are still to be appended."""
        return self._fed < self.shape.prompts or self._conversations_fed < self.shape.conversations

    def kill(self, name: str, down: float, stage: str) -> Fault:
        """SIGKILL process ``name``, leave it down ``down`` seconds, start it again."""
        proc = self.procs[name]
        at = time.monotonic()
        proc.kill()
        self.wait(down)
        proc.start()
        if name.startswith("sglang-"):
            self._wait_standin(int(name.split("-")[1]))
        return self._fault(stage, name, at)

    def wait_for_log(self, name: str, needle: str, timeout: float = 120.0) -> None:
        """Keep feeding until the log of ``name`` (since its last start) holds ``needle``.

        Raises:
            ScenarioFailure: not within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while needle not in self.procs[name].current_log():
            if time.monotonic() > deadline:
                raise ScenarioFailure(f"{name} never logged {needle!r}:\n{self.procs[name].tail()}")
            self.wait(0.5)

    def wait_until_flowing(self, timeout: float = 120.0) -> None:
        """Keep feeding until a reading of the offsets shows the sink committed rows.

        A fault struck before the first reading cannot be measured (its recovery has no
        "before"); on a loaded machine that reading can come later than the scenario's delay.

        Raises:
            ScenarioFailure: not within ``timeout`` seconds.
        """
        def flowing() -> bool:
            snaps = self.monitor.snapshots
            return bool(snaps) and sum(c for c, _end in snaps[-1].offsets.get("sink", {}).values()) > 0

        deadline = time.monotonic() + timeout
        while not flowing():
            if time.monotonic() > deadline:
                raise ScenarioFailure(f"the pipeline did not start moving within {timeout:.0f} s")
            self.wait(0.5)

    def pause(self, name: str, seconds: float, stage: str) -> Fault:
        """SIGSTOP process ``name`` for ``seconds``, then SIGCONT it.

        Past its session timeout the group moves its partitions to the other members. The
        recovery is measured from the pause's start until the stage has committed everything its
        input topic held when the pause ended (a group that took over during the pause: a little
        over the pause's length).
        """
        proc = self.procs[name]
        at = time.monotonic()
        proc.pause()
        try:
            self.wait(seconds)
        finally:
            proc.resume()
        fault = Fault(stage=stage, target=name, at=at, ended=time.monotonic(), since=at)
        self.faults.append(fault)
        log.info("%s: %s %s paused %.1fs", self.name, stage, name, fault.ended - at)
        return fault

    def restart_broker(self, down: float) -> Fault:
        """Stop the broker, leave it down ``down`` seconds while everything keeps running, start it."""
        at = time.monotonic()
        self.broker.stop()
        try:
            self.wait(down)
        finally:  # even when a process died meanwhile: the next scenario needs the broker
            self.broker.start()
        return self._fault("broker", "broker", at)

    def settle(self, fault: Fault, timeout: float = 60.0) -> None:
        """Keep feeding until ``fault``'s stage has caught up (or ``timeout``), so faults do not overlap."""
        if fault.stage == "producer" and not self.feeding:
            return  # nothing new to publish: its recovery cannot be seen
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.monitor.recovery(fault) in (None, float("inf")):
            self.wait(0.5)

    def _fault(self, stage: str, target: str, at: float) -> Fault:
        fault = Fault(stage=stage, target=target, at=at, ended=time.monotonic())
        self.faults.append(fault)
        log.info("%s: %s %s down %.1fs", self.name, stage, target, fault.ended - at)
        return fault

    # --- finishing --------------------------------------------------------------------
    def finish(self, quiet_seconds: float = 30.0) -> Finished:
        """Wait until every input is settled and the stages are idle; stop cleanly; settle the books."""
        started = self.monitor.started
        books = Books(expected=self.expected, dataset=self.dataset, kafka=self.kafka,
                      capture=self.shape.capture)
        deadline = started + self.shape.timeout
        try:
            while time.monotonic() < deadline and (self.feeding or not self._settled(books)):
                self.wait(1.0)
            if self.feeding or not self._settled(books):
                self.errors.append(f"not settled within {self.shape.timeout:.0f}s")
            quiet = time.monotonic() + quiet_seconds
            while time.monotonic() < quiet and not self._idle():
                self.wait(0.5)
        finally:
            books.close()
        notes = [self._standin_faults(), self._copies()]
        # A process restarted moments ago may still be importing, before its SIGTERM handler exists.
        youngest = min(time.monotonic() - proc.started_at for proc in self.procs.values())
        self.wait(max(0.0, STARTUP_SECONDS - youngest))
        for name in [*[n for n in self.procs if n.startswith("producer")],
                     *[n for n in self.procs if n.startswith("worker")],
                     *[n for n in self.procs if n == "converse"],
                     *[n for n in self.procs if n.startswith("sink")],
                     *[n for n in self.procs if n.startswith("sglang")]]:
            code = self.procs[name].stop()
            if code is None or (code != 0 and not name.startswith("sglang")):
                self.errors.append(f"{name} exited with {code} on SIGTERM:\n{self.procs[name].tail()}")
        self.monitor.stop()
        final = Books(expected=self.expected, dataset=self.dataset, kafka=self.kafka,
                      capture=self.shape.capture)
        try:
            final.refresh(budget=30.0)
            if self.shape.capture:
                final.collect_states()
            outcome = final.outcome()
        finally:
            final.close()
        for fault in self.faults:
            fault.recovery = self.monitor.recovery(fault)
        return Finished(outcome=outcome, faults=self.faults, errors=self.errors,
                        seconds=time.monotonic() - started, monitor=self.monitor, notes=notes)

    def _standin_faults(self) -> str:
        """The faults the stand-ins injected (a restarted stand-in counts from its restart)."""
        kinds: Counter[str] = Counter()
        for url in self.standin_urls:
            try:
                text = httpx.get(f"{url}/metrics", timeout=5).text
            except httpx.HTTPError:
                continue
            for kind, value in _FAULT_LINE.findall(text):
                kinds[kind] += int(float(value))
        shown = ", ".join(f"{k}={v}" for k, v in sorted(kinds.items())) or "none"
        return f"faults the stand-ins injected: {shown}"

    def _copies(self) -> str:
        """How many generations were published more than once (work redone after a fault)."""
        try:
            records, ids = generation_copies(self.kafka)
        except KafkaError as exc:
            return f"generations topic not readable: {exc!r}"
        return (f"generations published: {records} for {ids} record ids ({records - ids} more than once; "
                f"the sink kept one of each)")

    def _settled(self, books: Books) -> bool:
        try:
            books.refresh(budget=2.0)
        except KafkaError as exc:  # the broker may be restarting
            log.debug("books not readable now: %r", exc)
            return False
        return books.settled()

    def _idle(self) -> bool:
        """Whether both groups have committed everything (so no late record can still arrive)."""
        snaps = self.monitor.snapshots
        return bool(snaps) and all(committed >= end for parts in snaps[-1].offsets.values()
                                   for committed, end in parts.values())

    # --- helpers ----------------------------------------------------------------------
    def _append(self, lines: list[bytes]) -> None:
        self.expected.add_lines(self.input, self._next_line, lines)
        inputs.write_lines(self.input, lines)
        self._next_line += len(lines)

    def _pids(self) -> dict[str, int | None]:
        pids = {name: proc.pid for name, proc in self.procs.items()}
        pids["broker"] = self.broker.pid
        return pids
