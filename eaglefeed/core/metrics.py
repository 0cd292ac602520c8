"""Every Prometheus metric eaglefeed exports, built on an explicit registry.

Names follow Prometheus conventions: an ``eaglefeed_`` prefix, base units (seconds, bytes)
and ``_total`` on counters. Each process builds the set for its stage once and serves it.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from eaglefeed.core.config import metrics_host

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160, 320, 640)
TOKEN_BUCKETS = (16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)


@dataclass(frozen=True)
class ProducerMetrics:
    """Metrics of ``eaglefeed produce``."""

    rows_read: Counter
    prompts_published: Counter
    prompts_skipped: Counter
    lines_bad: Counter
    prompt_tokens: Counter
    render_seconds: Histogram

    @classmethod
    def create(cls, registry: CollectorRegistry) -> ProducerMetrics:
        """Register the producer metrics on ``registry``."""
        return cls(
            rows_read=Counter("eaglefeed_producer_rows_read_total", "Input rows read.", registry=registry),
            prompts_published=Counter("eaglefeed_producer_prompts_published_total",
                                      "Prompts published to the prompts topic.", registry=registry),
            prompts_skipped=Counter("eaglefeed_producer_prompts_skipped_total",
                                    "Prompts not published, by reason (done: already in the dataset; "
                                    "duplicate: published earlier in this run).", ["reason"],
                                    registry=registry),
            lines_bad=Counter("eaglefeed_producer_bad_lines_total",
                              "Input lines sent to the dead-letter topic, by reason.",
                              ["reason"], registry=registry),
            prompt_tokens=Counter("eaglefeed_producer_prompt_tokens_total",
                                  "Prompt tokens published.", registry=registry),
            render_seconds=Histogram("eaglefeed_producer_render_batch_seconds",
                                     "Time to render and tokenize one batch of prompts "
                                     "(sum / prompts published ≈ time per prompt).",
                                     buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10),
                                     registry=registry),
        )


@dataclass(frozen=True)
class WorkerMetrics:
    """Metrics of ``eaglefeed generate``."""

    stall_recoveries: Counter
    requests: Counter
    retries: Counter
    in_flight: Gauge
    request_seconds: Histogram
    generated_tokens: Counter
    hidden_state_bytes: Counter
    records_published: Counter
    dead_letters: Counter
    in_flight_requests: Gauge
    server_outstanding: Gauge
    server_healthy: Gauge
    server_limit: Gauge
    server_running: Gauge
    server_waiting: Gauge
    output_tokens: Histogram
    commit_lag: Gauge
    transactions: Counter
    capped: Counter
    identical_samples: Counter
    tokenizer_spot_checks: Counter
    routes: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> WorkerMetrics:
        """Register the worker metrics on ``registry``."""
        return cls(
            stall_recoveries=Counter("eaglefeed_worker_stall_recoveries_total",
                                     "Steps the stall watchdog took (seek, rejoin, exit): a partition with "
                                     "records that returned none for --stall-seconds.",
                                     ["action"], registry=registry),
            requests=Counter("eaglefeed_worker_requests_total",
                             "Requests to the inference server, by outcome.", ["outcome"],
                             registry=registry),
            retries=Counter("eaglefeed_worker_retries_total", "Retried requests, by reason.",
                            ["reason"], registry=registry),
            in_flight=Gauge("eaglefeed_worker_in_flight_records",
                            "Prompt records being generated.", registry=registry),
            request_seconds=Histogram("eaglefeed_worker_request_seconds",
                                      "Latency of one /generate request.",
                                      buckets=LATENCY_BUCKETS, registry=registry),
            generated_tokens=Counter("eaglefeed_worker_generated_tokens_total",
                                     "Output tokens received.", registry=registry),
            hidden_state_bytes=Counter("eaglefeed_worker_hidden_state_bytes_total",
                                       "Bytes of checked hidden-state files the published rows reference "
                                       "(--hidden-states).", registry=registry),
            records_published=Counter("eaglefeed_worker_records_published_total",
                                      "GenerationRecords acknowledged by the broker.",
                                      registry=registry),
            dead_letters=Counter("eaglefeed_worker_dead_letters_total",
                                 "Records sent to the dead-letter topic, by reason.", ["reason"],
                                 registry=registry),
            in_flight_requests=Gauge("eaglefeed_worker_in_flight_sequences",
                                     "Sequences (requests x n) being generated.", registry=registry),
            server_outstanding=Gauge("eaglefeed_worker_server_outstanding_requests",
                                     "Requests outstanding per inference server.", ["server"],
                                     registry=registry),
            server_healthy=Gauge("eaglefeed_worker_server_healthy",
                                 "1 while an inference server is in rotation.", ["server"],
                                 registry=registry),
            server_limit=Gauge("eaglefeed_worker_server_concurrency_limit",
                               "Sequences this worker may have in flight on an inference server "
                               "(--concurrency auto).", ["server"], registry=registry),
            server_running=Gauge("eaglefeed_worker_server_running_requests",
                                 "Requests an inference server reports running, all clients "
                                 "(--concurrency auto).", ["server"], registry=registry),
            server_waiting=Gauge("eaglefeed_worker_server_waiting_requests",
                                 "Requests an inference server reports waiting for a slot, all clients "
                                 "(--concurrency auto).", ["server"], registry=registry),
            output_tokens=Histogram("eaglefeed_worker_output_tokens",
                                    "Output tokens of one sample.", buckets=TOKEN_BUCKETS,
                                    registry=registry),
            commit_lag=Gauge("eaglefeed_worker_commit_lag_records",
                             "Input records fetched but not yet covered by a commit.",
                             registry=registry),
            transactions=Counter("eaglefeed_worker_transactions_total",
                                 "Kafka transactions (--exactly-once), by outcome: committed, aborted, "
                                 "or in_doubt (given up past --transaction-deadline; counted again once "
                                 "settled).", ["outcome"], registry=registry),
            capped=Counter("eaglefeed_worker_capped_samples_total",
                           "Samples the engine cut below max_new_tokens, by outcome (kept, dead_letter).",
                           ["outcome"], registry=registry),
            identical_samples=Counter("eaglefeed_worker_identical_samples_total",
                                      "Requests whose n samples at temperature > 0 came back identical.",
                                      registry=registry),
            tokenizer_spot_checks=Counter(
                "eaglefeed_worker_tokenizer_spot_checks_total",
                "Servers asked to tokenize a sampled prompt (1 in --tokenizer-spot-check), by outcome "
                "(agree, disagree with the prompts' tokenizer, unchecked: no usable answer).",
                ["outcome"], registry=registry),
            routes=Counter("eaglefeed_worker_routes_total",
                           "Requests by how their server was chosen: home (their conversation's server), "
                           "overloaded (it was: least-outstanding instead), least (no conversation).",
                           ["route"], registry=registry),
        )

    def spot_checked(self, outcome: str) -> None:
        """Count one server's answer to a tokenizer spot check (``SpotCheck``'s ``on_outcome``)."""
        self.tokenizer_spot_checks.labels(outcome).inc()

    def routed(self, route: str) -> None:
        """Count one request's route (``ServerPool``'s ``on_route``)."""
        self.routes.labels(route).inc()


@dataclass(frozen=True)
class SinkMetrics:
    """Metrics of ``eaglefeed sink``."""

    stall_recoveries: Counter
    rows_written: Counter
    bytes_written: Counter
    segments_written: Counter
    segments_fenced: Counter
    duplicates_dropped: Counter
    dead_letters: Counter
    flush_seconds: Histogram
    buffered_records: Gauge
    commit_lag_seconds: Gauge
    index_ids: Gauge

    @classmethod
    def create(cls, registry: CollectorRegistry) -> SinkMetrics:
        """Register the sink metrics on ``registry``."""
        return cls(
            stall_recoveries=Counter("eaglefeed_sink_stall_recoveries_total",
                                     "Steps the stall watchdog took (seek, rejoin, exit): a partition with "
                                     "records that returned none for --stall-seconds.",
                                     ["action"], registry=registry),
            rows_written=Counter("eaglefeed_sink_rows_written_total", "Training rows written.",
                                 registry=registry),
            bytes_written=Counter("eaglefeed_sink_bytes_written_total",
                                  "Bytes of Parquet written.", registry=registry),
            segments_written=Counter("eaglefeed_sink_segments_written_total",
                                     "Parquet segments committed.", registry=registry),
            segments_fenced=Counter("eaglefeed_sink_segments_fenced_total",
                                    "Segments not written: their partition had a newer owner.",
                                    registry=registry),
            duplicates_dropped=Counter("eaglefeed_sink_duplicates_dropped_total",
                                       "Records dropped because their id was already written.",
                                       registry=registry),
            dead_letters=Counter("eaglefeed_sink_dead_letters_total",
                                 "Records sent to the dead-letter topic, by reason.", ["reason"],
                                 registry=registry),
            flush_seconds=Histogram("eaglefeed_sink_flush_seconds",
                                    "Time to decode, write, fsync and commit one segment.",
                                    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
                                    registry=registry),
            buffered_records=Gauge("eaglefeed_sink_buffered_records",
                                   "Records read but not yet in a committed segment.", registry=registry),
            commit_lag_seconds=Gauge("eaglefeed_sink_commit_lag_seconds",
                                     "Age of the oldest record read but not yet committed.",
                                     registry=registry),
            index_ids=Gauge("eaglefeed_sink_index_ids",
                            "Record ids in the deduplication index.", registry=registry),
        )


@dataclass(frozen=True)
class ConverseMetrics:
    """Metrics of ``eaglefeed converse`` (the continuation of regenerated conversations)."""

    stall_recoveries: Counter
    started: Counter
    ended: Counter
    turns_continued: Counter
    continuation_seconds: Histogram
    dead_letters: Counter
    unaccounted: Counter

    @classmethod
    def create(cls, registry: CollectorRegistry) -> ConverseMetrics:
        """Register the converse metrics on ``registry``."""
        return cls(
            stall_recoveries=Counter("eaglefeed_converse_stall_recoveries_total",
                                     "Steps the stall watchdog took (seek, rejoin, exit): a partition with "
                                     "records that returned none for --stall-seconds.",
                                     ["action"], registry=registry),
            started=Counter("eaglefeed_converse_conversations_started_total",
                            "Conversation lanes started (a turn-0 generation of each sample, or the end "
                            "of a lane whose turn 0 this stage never continued). Monotonic: started - "
                            "ended summed over the members and a long enough window approximates the "
                            "lanes in progress; the exact figure is `eaglefeed status`.",
                            registry=registry),
            ended=Counter("eaglefeed_converse_conversations_ended_total",
                          "Conversation lanes ended, by outcome (complete, truncated, dead_letter) "
                          "and reason.", ["outcome", "reason"], registry=registry),
            turns_continued=Counter("eaglefeed_converse_turns_continued_total",
                                    "Next-turn prompts published to the prompts topic.", registry=registry),
            continuation_seconds=Histogram("eaglefeed_converse_continuation_seconds",
                                           "Time to build one next-turn prompt (or end) from a generation.",
                                           buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                    0.25, 0.5, 1),
                                           registry=registry),
            dead_letters=Counter("eaglefeed_converse_dead_letters_total",
                                 "Records sent to the dead-letter topic, by reason.", ["reason"],
                                 registry=registry),
            unaccounted=Counter("eaglefeed_converse_unaccounted_total",
                                "Dead-lettered records (a converse dead letter of a generation, or a worker "
                                "dead letter of a prompt) whose conversation lane cannot be read: if they "
                                "were a conversation's, that lane has no ended event.", ["input"],
                                registry=registry),
        )


def serve_metrics(registry: CollectorRegistry, port: int | None, host: str | None = None) -> None:
    """Serve ``registry`` on ``http://host:port/metrics`` in a daemon thread (no-op without a port).

    The host defaults to 127.0.0.1, or ``EAGLEFEED_METRICS_HOST`` (e.g. 0.0.0.0 in containers).
    """
    if port is not None:
        start_http_server(port, addr=host or metrics_host(), registry=registry)


@dataclass(frozen=True)
class LagMetrics:
    """Consumer lag of a stage, per partition, measured by the stage itself (see eaglefeed.core.lag)."""

    lag: Gauge
    committed: Gauge
    end: Gauge

    @classmethod
    def create(cls, registry: CollectorRegistry) -> LagMetrics:
        """Register the lag gauges on ``registry``."""
        labels = ["stage", "topic", "partition"]
        return cls(
            lag=Gauge("eaglefeed_consumer_lag_records",
                      "Records in the stage's input topic not yet committed by its group.", labels,
                      registry=registry),
            committed=Gauge("eaglefeed_consumer_committed_offset",
                            "The group's committed offset (rate() of it is the stage's throughput).",
                            labels, registry=registry),
            end=Gauge("eaglefeed_topic_end_offset", "End offset of the stage's input topic.", labels,
                      registry=registry),
        )
