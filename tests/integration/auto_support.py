"""Helpers of the ``--concurrency auto`` runs: a backlog kept up, samples.

The worker's limits are read where an operator reads them (its Prometheus ``/metrics``:
``eaglefeed_worker_server_concurrency_limit{server}``) and the server's load where the worker
reads it (the stand-in's ``/metrics``), by a sampler thread, so a test asserts on a timeline
rather than on one lucky reading.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import httpx
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.kafka import ensure_topics, pipeline_topics
from eaglefeed.schemas import PROMPT
from tests.factories import make_prompt

LIMIT = "eaglefeed_worker_server_concurrency_limit"
RUNNING, WAITING = "sglang:num_running_reqs", "sglang:num_queue_reqs"
# Short requests of a batching engine (~0.4-0.6 s each: 20 tokens of 20 ms steps), so a limit
# moves within seconds and a backlog of a few hundred prompts lasts a phase of a test.
STANDIN_FLAGS = ("--latency-model", "batching", "--decode-step-ms", "20", "--output-len-mean", "20",
                 "--output-len-sigma", "0.3", "--think-fraction", "0", "--tool-call-fraction", "0",
                 "--length-fraction", "0")
PARTITIONS = 4
WORKER_FLAGS = ("--settle-seconds", "0", "--probe-interval", "0.5", "--commit-interval", "0.2",
                "--progress-seconds", "2", "--drain-seconds", "20")


def gauges(url: str, *names: str, timeout: float = 2.0) -> dict[str, dict[str, float]]:
    """Every sample of each metric in ``names`` on ``url/metrics``, from one read of the page.

    Keyed by metric name, then by the label values joined with ",".
    """
    text = httpx.get(f"{url}/metrics", timeout=timeout).text
    found: dict[str, dict[str, float]] = {name: {} for name in names}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in found:
                found[sample.name][",".join(sample.labels.values())] = sample.value
    return found


@dataclass(frozen=True)
class Sample:
    """One reading: seconds since the sampler started, each worker's limit, the server's load."""

    at: float
    limits: tuple[float | None, ...]
    running: float | None
    waiting: float | None

    @property
    def total(self) -> float | None:
        """The sum of the workers' limits; None while one of them has not exported a limit."""
        return None if any(v is None for v in self.limits) else sum(v for v in self.limits if v is not None)


@dataclass
class Sampler:
    """Read the workers' limits for ``server`` and the server's load every ``every`` seconds, on a thread.

    Args:
        server: the stand-in's URL (the label of the workers' limit).
        worker_metrics: each worker's metrics URL.
        every: seconds between readings.
    """

    server: str
    worker_metrics: Sequence[str]
    every: float = 0.25
    samples: list[Sample] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def now(self) -> float:
        """Seconds since the sampler started (the samples' clock)."""
        return time.monotonic() - self._started

    def close(self) -> None:
        """Stop reading."""
        self._stop.set()
        self._thread.join(10)

    def since(self, start: float) -> list[Sample]:
        """The samples taken at or after ``start``."""
        return [s for s in list(self.samples) if s.at >= start]

    def wait_for(self, check: Callable[[list[Sample]], bool], *, start: float, timeout: float,
                 what: str) -> float:
        """Wait until ``check`` holds on the samples since ``start``; returns when (sampler clock)."""
        deadline = time.monotonic() + timeout
        while not check(self.since(start)):
            assert time.monotonic() < deadline, f"timed out: {what}; last: {self.since(start)[-8:]}"
            time.sleep(0.2)
        return self.now()

    def wait_until(self, at: float) -> None:
        """Sleep until the sampler's clock reads ``at`` (a window to observe, not a timing asserted)."""
        time.sleep(max(0.0, at - self.now()))

    def timeline(self, every: float = 1.0) -> str:
        """About one sample per ``every`` seconds as ``t: limits running/waiting``, for a failure or -s."""
        out, next_at = [], 0.0
        for s in list(self.samples):
            if s.at >= next_at:
                limits = "+".join("-" if v is None else f"{v:.0f}" for v in s.limits)
                out.append(f"{s.at:.1f}: {limits} {s.running}/{s.waiting}")
                next_at = s.at + every
        return "; ".join(out)

    def _run(self) -> None:
        while not self._stop.is_set():
            limits = tuple(self._limit(url) for url in self.worker_metrics)
            try:
                load = gauges(self.server, RUNNING, WAITING)
                running, waiting = sum(load[RUNNING].values()), sum(load[WAITING].values())
            except httpx.HTTPError:  # the server is down (restarting)
                running = waiting = None
            self.samples.append(Sample(at=self.now(), limits=limits, running=running, waiting=waiting))
            self._stop.wait(self.every)

    def _limit(self, metrics_url: str) -> float | None:
        try:
            return gauges(metrics_url, LIMIT)[LIMIT].get(self.server)
        except httpx.HTTPError:  # the worker has not opened its /metrics yet
            return None


def median(values: Sequence[float | None]) -> float:
    """The median of the readings that were taken (a server down reads None)."""
    taken = [v for v in values if v is not None]
    assert taken, "no readings"
    return float(statistics.median(taken))


class Backlog:
    """Keep ``low`` unfinished prompts on the prompts topic (published − generated), on a thread.

    A test stays in "a backlog" however fast the machine runs, and what is left to drain when it
    stops topping up is about ``low`` prompts, not whatever a fixed count overshot by.

    Args:
        kafka: the pipeline's topics.
        low: unfinished prompts below which a chunk is published.
        chunk: prompts per chunk.
        partitions: partitions of the prompts topic (created here).
    """

    def __init__(self, kafka: KafkaConfig, *, low: int, chunk: int = 100,
                 partitions: int = PARTITIONS) -> None:
        self.kafka, self.low, self.chunk, self.partitions = kafka, low, chunk, partitions
        ensure_topics(kafka, pipeline_topics(kafka, partitions))
        self._producer = KafkaProducer(bootstrap_servers=kafka.bootstrap_servers, acks="all", linger_ms=5)
        self._consumer = KafkaConsumer(bootstrap_servers=kafka.bootstrap_servers)  # end offsets only
        deadline = time.monotonic() + 30
        while not (parts := self._consumer.partitions_for_topic(kafka.generations_topic)):
            assert time.monotonic() < deadline, f"{kafka.generations_topic} has no partitions"
            time.sleep(0.2)
        self._generations = [TopicPartition(kafka.generations_topic, p) for p in sorted(parts)]
        self.expected: set[str] = set()  # generation ids: prompt_id:sample
        self._next = 0
        self._stop = threading.Event()
        self._publish(low + chunk)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop topping up: what was published stays to be generated."""
        self._stop.set()
        self._thread.join(30)

    def close(self) -> None:
        """Stop topping up and close the Kafka clients."""
        self.stop()
        self._producer.close()
        self._consumer.close()

    def generated(self) -> int:
        """Generation records on the topic now (a record published twice counts twice)."""
        return sum(self._consumer.end_offsets(self._generations).values())

    def _run(self) -> None:
        while not self._stop.wait(0.3):
            if self._next - self.generated() < self.low:
                self._publish(self.chunk)

    def _publish(self, count: int) -> None:
        futures = []
        for i in range(self._next, self._next + count):
            prompt = make_prompt(i, max_new_tokens=64)
            self.expected.add(f"{prompt['prompt_id']}:0")
            futures.append(self._producer.send(self.kafka.prompts_topic, key=b"k%d" % i,
                                               value=PROMPT.encode(prompt), partition=i % self.partitions))
        for future in futures:
            future.get(timeout=30)
        self._next += count
