"""SGLang-named Prometheus metrics, plus stand-in extensions, on an explicit registry.

Scheduler-side series carry ``model_name``, ``engine_type="unified"``, ``tp_rank="0"`` and
``pp_rank="0"``; tokenizer-side series carry ``model_name`` and ``engine_type`` (as in SGLang).

Stand-in extensions (not in SGLang):

- ``eaglefeed_standin_running_request_seconds_total``: integral over time of the number of
  running requests. Busy fraction over an interval =
  Δrunning_request_seconds / (Δt × eaglefeed_standin_max_running_requests).
- ``eaglefeed_standin_max_running_requests``: slot count.
- ``eaglefeed_standin_uptime_seconds``: seconds since the server started.
- ``eaglefeed_standin_faults_injected_total{kind}``: injected faults by kind.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from eaglefeed.devtools.standin.config import FAULT_KINDS
from eaglefeed.devtools.standin.scheduler import Scheduler, Sequence

_LATENCY_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    20,
    40,
    80,
    160,
    320,
    640,
)
_SCHEDULER_LABELS = ("model_name", "engine_type", "tp_rank", "pp_rank")
_TOKENIZER_LABELS = ("model_name", "engine_type")


class ThroughputMeter:
    """Tokens per second over the last few whole seconds (``sglang:gen_throughput``)."""

    def __init__(self, *, window_seconds: int = 5, clock: Callable[[], float] = time.monotonic) -> None:
        """Create an empty meter.

        Args:
            window_seconds: averaging window.
            clock: monotonic clock (seconds).
        """
        self._window = window_seconds
        self._clock = clock
        self._buckets: dict[int, int] = {}

    def add(self, tokens: int) -> None:
        """Count tokens generated now."""
        second = int(self._clock())
        self._buckets[second] = self._buckets.get(second, 0) + tokens
        if len(self._buckets) > self._window + 2:
            for old in [s for s in self._buckets if s < second - self._window]:
                del self._buckets[old]

    def rate(self) -> float:
        """Return the average tokens/s over the completed seconds of the window."""
        now = int(self._clock())
        total = sum(n for s, n in self._buckets.items() if now - self._window <= s < now)
        return total / self._window


@dataclass(frozen=True, kw_only=True)
class StandinMetrics:
    """Every metric of one stand-in server.

    Build with ``StandinMetrics.create``; record one finished sequence with ``observe``.
    """

    registry: CollectorRegistry
    prompt_tokens: Counter
    generation_tokens: Counter
    cached_tokens: Counter
    requests: Counter
    aborted_requests: Counter
    e2e_latency: Histogram
    time_to_first_token: Histogram
    queue_time: Histogram
    faults: dict[str, Counter]
    throughput: ThroughputMeter
    hits: HitRate

    @classmethod
    def create(
        cls, *, model_name: str, scheduler: Scheduler, total_tokens: int, started_at: float
    ) -> StandinMetrics:
        """Build the metrics on a fresh registry and bind the gauges to ``scheduler``.

        Args:
            model_name: the ``model_name`` label.
            scheduler: where running/queue counts are read at scrape time.
            total_tokens: the emulated KV pool size (denominator of ``sglang:token_usage``).
            started_at: monotonic start time (for uptime).
        """
        registry = CollectorRegistry(auto_describe=True)
        tok = {"model_name": model_name, "engine_type": "unified"}
        sched = {**tok, "tp_rank": "0", "pp_rank": "0"}
        throughput = ThroughputMeter()
        hits = HitRate()

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, _TOKENIZER_LABELS, registry=registry).labels(**tok)

        def histogram(name: str, doc: str, labels: tuple[str, ...], values: dict[str, str]) -> Histogram:
            return Histogram(name, doc, labels, buckets=_LATENCY_BUCKETS, registry=registry).labels(**values)

        gauges: dict[str, tuple[str, Callable[[], float]]] = {
            "sglang:num_running_reqs": (
                "The number of running requests.",
                lambda: scheduler.num_running,
            ),
            "sglang:num_queue_reqs": (
                "The number of requests in the waiting queue.",
                lambda: scheduler.num_waiting,
            ),
            "sglang:gen_throughput": ("The generation throughput (token/s).", throughput.rate),
            "sglang:token_usage": (
                "The token usage.",
                lambda: scheduler.used_tokens() / max(total_tokens, 1),
            ),
            "sglang:cache_hit_rate": ("The prefix cache hit rate.", hits.rate),
            "sglang:utilization": (
                "Share of slots in use.",
                lambda: scheduler.num_running / scheduler.max_running,
            ),
        }
        for name, (doc, read) in gauges.items():
            Gauge(name, doc, _SCHEDULER_LABELS, registry=registry).labels(**sched).set_function(read)
        registry.register(_StandinCollector(scheduler=scheduler, started_at=started_at))
        faults = Counter(
            "eaglefeed_standin_faults_injected",
            "Faults injected by kind (stand-in).",
            ["kind"],
            registry=registry,
        )
        metrics = cls(
            registry=registry,
            prompt_tokens=counter("sglang:prompt_tokens", "Number of prefill tokens processed."),
            generation_tokens=counter("sglang:generation_tokens", "Number of generation tokens processed."),
            cached_tokens=counter("sglang:cached_tokens", "Number of cached prompt tokens."),
            requests=counter("sglang:num_requests", "Number of requests processed."),
            aborted_requests=counter("sglang:num_aborted_requests", "Number of requests aborted."),
            e2e_latency=histogram(
                "sglang:e2e_request_latency_seconds",
                "Histogram of End-to-end request latency in seconds",
                _TOKENIZER_LABELS,
                tok,
            ),
            time_to_first_token=histogram(
                "sglang:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                _TOKENIZER_LABELS,
                tok,
            ),
            queue_time=histogram(
                "sglang:queue_time_seconds",
                "Histogram of queueing time in seconds.",
                _SCHEDULER_LABELS,
                sched,
            ),
            faults={kind: faults.labels(kind=kind) for kind in FAULT_KINDS},
            throughput=throughput,
            hits=hits,
        )
        return metrics

    def observe(self, seq: Sequence) -> None:
        """Record one finished sequence."""
        completion = seq.emitted
        self.requests.inc()
        self.prompt_tokens.inc(seq.prompt_len)
        self.cached_tokens.inc(seq.cached_tokens)
        self.generation_tokens.inc(completion)
        self.throughput.add(completion)
        self.hits.add(prompt=seq.prompt_len, cached=seq.cached_tokens)
        if seq.finish_reason is not None and seq.finish_reason.get("type") == "abort":
            self.aborted_requests.inc()
        if seq.finished_at is not None:
            self.e2e_latency.observe(seq.finished_at - seq.arrival)
        if seq.first_token_at is not None:
            self.time_to_first_token.observe(seq.first_token_at - seq.arrival)
        if seq.admitted_at is not None:
            self.queue_time.observe(seq.admitted_at - seq.arrival)


class HitRate:
    """Cached / prompt tokens since start (``sglang:cache_hit_rate``)."""

    def __init__(self) -> None:
        """Start with no tokens seen."""
        self._prompt = 0
        self._cached = 0

    def add(self, *, prompt: int, cached: int) -> None:
        """Count one request's prompt and cached tokens."""
        self._prompt += prompt
        self._cached += cached

    def rate(self) -> float:
        """Return the hit rate in [0, 1]."""
        return self._cached / self._prompt if self._prompt else 0.0


class _StandinCollector(Collector):
    """Stand-in extension series computed at scrape time."""

    def __init__(self, *, scheduler: Scheduler, started_at: float) -> None:
        self._scheduler = scheduler
        self._started_at = started_at

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        yield CounterMetricFamily(
            "eaglefeed_standin_running_request_seconds",
            "Integral over time of the number of running requests (stand-in extension).",
            value=self._scheduler.running_request_seconds(),
        )
        yield GaugeMetricFamily(
            "eaglefeed_standin_max_running_requests",
            "Number of decode slots (stand-in extension).",
            value=self._scheduler.max_running,
        )
        yield GaugeMetricFamily(
            "eaglefeed_standin_uptime_seconds",
            "Seconds since the stand-in started (stand-in extension).",
            value=time.monotonic() - self._started_at,
        )
