"""``eaglefeed produce``: inputs → render (in process or in render processes) → Kafka.

The main loop reads rows into batches, has them built (parsed, rendered, tokenized, encoded),
and publishes the results in input order: records keyed by ``prompt_id`` to the prompts topic,
rejections to the dead-letter topic. A checkpoint flushes the producer, fails the run if any
record was not acknowledged, sends the fix markers of lines dead-lettered before and published
now (:mod:`eaglefeed.producers.fixes`) and flushes again, and only then saves the progress
ledger, so a restart re-reads exactly the rows whose records (or markers) might not have been written.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry

from eaglefeed.core.clients import Clients, KafkaClients, Producer
from eaglefeed.core.config import ProducerConfig
from eaglefeed.core.errors import DeliveryError
from eaglefeed.core.kafka import pipeline_topics
from eaglefeed.core.lifecycle import StopSignal
from eaglefeed.core.metrics import ProducerMetrics, serve_metrics
from eaglefeed.producers.build import BatchResult
from eaglefeed.producers.context import context_warning
from eaglefeed.producers.fixes import LineFixes
from eaglefeed.producers.follow import Idle, StreamItem, input_stream
from eaglefeed.producers.identity import PromptIdentity, check_identity, identity_in_use
from eaglefeed.producers.ledger import Ledger, open_ledger
from eaglefeed.producers.pool import Batch, RenderPool
from eaglefeed.producers.progress import Progress
from eaglefeed.producers.sources import MARK_EVERY, STDIN, InputFile, Mark, discover, unused_overrides
from eaglefeed.schemas.deadletter import dead_letter
from eaglefeed.schemas.redriven import MARKER_TOPIC_CONFIG

log = logging.getLogger(__name__)

CHECKPOINT_SECONDS = 5.0
LINGER_MS = 50
LOG_SECONDS = 60.0


@dataclass
class ProduceSummary:
    """Counts of one producer run."""

    rows: int = 0
    published: int = 0
    prompt_tokens: int = 0
    skipped_by_reason: dict[str, int] = field(default_factory=dict)
    dead_lettered: int = 0
    bad_by_reason: dict[str, int] = field(default_factory=dict)
    fixed: int = 0  # lines dead-lettered by an earlier read and published now (their letters marked fixed)
    already_lettered: int = 0  # bad lines whose open letter of the same reason was sent by an earlier read

    @property
    def skipped(self) -> int:
        """Prompts not published because they were done or duplicates."""
        return sum(self.skipped_by_reason.values())

    def describe(self) -> str:
        """One line for the operator."""
        skipped = ", ".join(f"{k}={v}" for k, v in sorted(self.skipped_by_reason.items()))
        bad = ", ".join(f"{k}={v}" for k, v in sorted(self.bad_by_reason.items()))
        return (f"read {self.rows} rows: published {self.published} prompts ({self.prompt_tokens} tokens); "
                f"skipped {self.skipped}" + (f" ({skipped})" if skipped else "")
                + f"; dead-lettered {self.dead_lettered}" + (f" ({bad})" if bad else "")
                + (f"; {self.already_lettered} bad lines already dead-lettered (their open letters stand)"
                   if self.already_lettered else "")
                + (f"; fixed {self.fixed} lines dead-lettered before" if self.fixed else ""))


def run_producer(cfg: ProducerConfig, *, registry: CollectorRegistry | None = None,
                 stop: StopSignal | None = None, clients: Clients | None = None) -> ProduceSummary:
    """Publish every prompt of ``cfg.inputs``; bad rows go to the dead-letter topic.

    With ``cfg.workers`` > 0 the rendering runs in spawned processes, so a script that calls this
    needs the usual ``if __name__ == "__main__":`` guard.

    Args:
        cfg: the run's settings.
        registry: where the metrics live (a fresh one when omitted).
        stop: ends the run cleanly (needed to end ``cfg.follow``).
        clients: where the producer comes from and the topics are created (a test seam; the real
            broker of ``cfg.kafka`` when None).

    Returns:
        the counts of rows read, prompts published and skipped, and dead letters by reason.

    Raises:
        DeliveryError: when Kafka did not acknowledge a record.
        EaglefeedError: on bad configuration (tokenizer, overrides, ledger, dataset to skip).
    """
    # Found once and passed down; bad inputs or sidecars fail here, before anything starts.
    files = discover(cfg.inputs, missing_ok=cfg.follow)
    for orphan in unused_overrides(cfg.inputs, files=files):
        log.warning("overrides file %s matches no input (name it <input>.overrides.json or "
                    "<input stem>.overrides.json); it is not used", orphan)
    registry = registry or CollectorRegistry()
    metrics = ProducerMetrics.create(registry)
    serve_metrics(registry, cfg.metrics_port)
    stop = stop or StopSignal()
    clients = clients or KafkaClients(kafka=cfg.kafka)
    ledger = open_ledger(cfg, files=files)
    try:
        with RenderPool(cfg.prompts, workers=cfg.workers) as pool:
            created = clients.ensure_topics(pipeline_topics(cfg.kafka, cfg.partitions))
            if cfg.sampling_note:  # once Kafka answered: an unreachable broker stays one line
                log.info("%s", cfg.sampling_note)
            if (too_long := context_warning(cfg.prompts)) is not None:
                log.warning("%s", too_long)
            if ledger is not None and cfg.kafka.prompts_topic in created and ledger.positions():
                log.warning("the prompts topic %s is new, so the saved progress in %s belongs to another "
                            "broker: publishing every input again", cfg.kafka.prompts_topic, ledger.path)
                ledger.reset()
            if ledger is not None and cfg.kafka.dead_letter_topic in created:
                ledger.dead_lettered.forget_reasons()  # the letters it remembers are not on this topic
            progress = Progress(enabled=cfg.progress,
                                total_bytes=_total_bytes(cfg, files=files, ledger=ledger))
            # Prompts wait seconds for a GPU anyway: a longer linger makes fuller batches and
            # costs the Kafka IO thread less CPU per record (about a fifth less than 5 ms here).
            # Before anything is sent: the tokenizer in use on the prefix (none on a new topic).
            in_use = None if cfg.allow_mixed else _identity_in_use(clients, cfg.kafka.prompts_topic)
            producer = clients.producer(linger_ms=LINGER_MS)
            marker = cfg.kafka.redriven_topic  # created once the first marker is due (most runs send none)
            publisher = Publisher(cfg=cfg, producer=producer, metrics=metrics, ledger=ledger,
                                  progress=progress, in_use=in_use,
                                  ensure_marker_topic=lambda: clients.ensure_topics(
                                      {marker: 1}, configs={marker: MARKER_TOPIC_CONFIG}))
            try:
                stream = input_stream(cfg.inputs, files=files, ledger=ledger, follow=cfg.follow, stop=stop,
                                      poll_interval=cfg.poll_interval, settle=cfg.settle_seconds)
                for batch in _batches(stream, cfg.batch_size, stop):
                    pool.submit(batch)
                    for done, result in pool.results(drain=batch.idle):
                        publisher.publish(done, result)
                    if batch.idle:
                        publisher.checkpoint()
                for done, result in pool.results(drain=True):
                    publisher.publish(done, result)
                publisher.checkpoint()
            finally:
                publisher.close()
    finally:
        if ledger is not None:
            ledger.close()
    if ledger is not None and stop.is_set() and not cfg.follow:
        log.warning("interrupted: what Kafka acknowledged is saved in %s; run the same command again "
                    "to resume (--restart starts over)", ledger.path)
    return publisher.summary


SEEN_LIMIT = 1_000_000
"""Prompt ids the producer remembers to skip in-run duplicates (about 100 MB at most): under
``--follow`` the run never ends, so the oldest are forgotten. A duplicate older than that is
published again; the sink keeps the dataset free of it (only generation work is repeated)."""


class RecentIds:
    """The last ``limit`` distinct ids added, oldest forgotten first (a bounded set).

    A set for the lookups and a deque for the order: both O(1) per id. (An insertion-ordered
    dict whose first key is deleted each time is not: the deleted slots pile up at its front
    until it is resized, and finding the first key walks over them, so once full every add
    cost O(limit): measured 50x slower at a 100,000 limit, see ``bench/producer_seen.py``.)
    About 94 bytes per id: 1,000,000 ids hold about 94 MB.

    Args:
        limit: how many ids to remember.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._ids: set[int] = set()
        self._order: deque[int] = deque()  # the oldest on the left

    def __contains__(self, pid: object) -> bool:
        return pid in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, pid: int) -> None:
        """Remember ``pid``; forget the oldest id beyond ``limit``."""
        if pid in self._ids:
            return
        self._ids.add(pid)
        self._order.append(pid)
        if len(self._order) > self.limit:
            self._ids.discard(self._order.popleft())


class Publisher:
    """Sends built records and dead letters, counts them, and saves progress at checkpoints.

    Args:
        cfg: the run's settings.
        producer: where the records go.
        metrics: the producer's metrics.
        ledger: the progress ledger (None: progress is not saved, and no fix markers are sent).
        progress: the progress bar.
        ensure_marker_topic: creates the topic of fix markers; called once, before the first is sent.
        in_use: the identity of the prompts already on the topic: a batch of another is refused
            before any of it is sent (None: nothing to check).
    """

    def __init__(self, *, cfg: ProducerConfig, producer: Producer, metrics: ProducerMetrics,
                 ledger: Ledger | None, progress: Progress,
                 ensure_marker_topic: Callable[[], object], in_use: PromptIdentity | None = None) -> None:
        self.cfg = cfg
        self.producer = producer
        self.metrics = metrics
        self.ledger = ledger
        self.progress = progress
        self.summary = ProduceSummary()
        # Without a ledger nothing remembers what an earlier run dead-lettered: no fix markers.
        self.fixes = LineFixes(ledger.dead_lettered) if ledger is not None else None
        self._ensure_marker_topic: Callable[[], object] | None = ensure_marker_topic
        self._seen = RecentIds(SEEN_LIMIT)  # prompt ids published lately in this run (128-bit integers)
        self._error: BaseException | None = None
        self._in_use = in_use
        self._checkpointed = self._logged = time.monotonic()

    def publish(self, batch: Batch, result: BatchResult) -> None:
        """Send what ``batch`` became, then note its marks as sent."""
        self._raise_if_failed()
        topic, send, failed = self.cfg.kafka.prompts_topic, self.producer.send, self._failed
        if self._in_use is not None and result.renderer is not None and result.prompts:
            check_identity(self._in_use, result.renderer, topic=topic)
            self._in_use = None  # one renderer per run: checked once is checked
        s, m = self.summary, self.metrics
        published = tokens = duplicates = 0
        for key, value, n in result.prompts:
            pid = int(key, 16)
            if pid in self._seen:
                duplicates += 1
                continue
            self._seen.add(pid)
            send(topic, key=key, value=value).add_errback(failed)
            published += 1
            tokens += n
        for key, value in result.events:  # after the prompts they describe, in the same checkpoint
            send(self.cfg.kafka.conversations_topic, key=key, value=value).add_errback(failed)
        memory = self.fixes.memory if self.fixes is not None else None
        for bad in result.rejected:
            if memory is not None and memory.lettered(bad.source, bad.line, bad.reason):
                s.already_lettered += 1  # one open letter per bad line, however often it is read
                continue
            send(self.cfg.kafka.dead_letter_topic, key=f"{bad.source}:{bad.line}".encode(),
                 value=dead_letter(stage="produce", kind=bad.reason, message=bad.message, source=bad.source,
                                   line=bad.line, value=bad.raw)).add_errback(failed)
            s.bad_by_reason[bad.reason] = s.bad_by_reason.get(bad.reason, 0) + 1
            s.dead_lettered += 1
            m.lines_bad.labels(bad.reason).inc()
        if self.fixes is not None:
            self.fixes.note(published=result.lines,
                            rejected=[((bad.source, bad.line), bad.reason) for bad in result.rejected])
        s.rows += result.rows
        s.published += published
        s.prompt_tokens += tokens
        for reason, count in (("done", result.skipped_done), ("duplicate", duplicates)):
            if count:
                s.skipped_by_reason[reason] = s.skipped_by_reason.get(reason, 0) + count
                m.prompts_skipped.labels(reason).inc(count)
        m.rows_read.inc(result.rows)
        m.prompts_published.inc(published)
        m.prompt_tokens.inc(tokens)
        if result.rows:
            m.render_seconds.observe(result.render_seconds)
        for mark in batch.marks:
            if self.ledger is not None:
                self.ledger.advance(mark)
        self.progress.update(published=s.published, bad=s.dead_lettered + s.already_lettered,
                             skipped=s.skipped, nbytes=sum(mark.nbytes for mark in batch.marks))
        if time.monotonic() - self._checkpointed >= CHECKPOINT_SECONDS:
            self.checkpoint()

    def checkpoint(self) -> None:
        """Wait until Kafka acknowledged everything sent, then save the progress ledger.

        1. flush the producer, and fail if any record was not acknowledged;
        2. if lines dead-lettered before were published since: send their fix markers, flush again
           and fail the same way (a marker never names a prompt that was not acknowledged);
        3. save the ledger: the positions advanced, and the dead-lettered lines less the fixed ones.

        Raises:
            DeliveryError: when a record was not acknowledged.
        """
        self.producer.flush()
        self._raise_if_failed()
        if self.fixes is not None and self.fixes.pending:
            self._mark_fixed(self.fixes)
        if self.ledger is not None:
            self.ledger.commit()
        now = self._checkpointed = time.monotonic()
        if self.cfg.follow and not self.progress.enabled and now - self._logged >= LOG_SECONDS:
            self._logged = now
            log.info("%s", self.summary.describe())

    def _mark_fixed(self, fixes: LineFixes) -> None:
        """Send the fix markers of the lines published (and acknowledged) since the last checkpoint.

        The ledger forgets those lines only once the markers are acknowledged, in the commit that
        follows; a run cut short before that sends them again on its next read (the newest counts).
        """
        if self._ensure_marker_topic is not None:
            self._ensure_marker_topic()
            self._ensure_marker_topic = None
        for key, value in fixes.markers(at_ms=int(time.time() * 1000)):
            self.producer.send(self.cfg.kafka.redriven_topic, key=key, value=value).add_errback(self._failed)
        self.producer.flush()
        self._raise_if_failed()
        fixed = fixes.acknowledged()
        self.summary.fixed += fixed
        log.info("marked the dead letters of %d fixed input lines resolved (%s)", fixed,
                 self.cfg.kafka.redriven_topic)

    def close(self) -> None:
        """Erase the progress bar and close the Kafka producer (it sends what it still holds)."""
        self.progress.close()
        self.producer.close(timeout=30)

    def _failed(self, exc: BaseException) -> None:
        # Runs on kafka-python's IO thread: only remember the first failure.
        if self._error is None:
            self._error = exc

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise DeliveryError(f"Kafka did not acknowledge a record: {self._error!r}")


def _batches(stream: Iterator[StreamItem], size: int, stop: StopSignal) -> Iterator[Batch]:
    """Group rows into batches of ``size``; marks ride with the batch they follow; idle ends a batch.

    Once stopped, rows are still read up to the next mark (at most ``MARK_EVERY``), so that
    everything published on the way out is also saved in the ledger and not published again.
    """
    batch = Batch()
    after_stop = 0  # rows read since the stop (a JSON array or Parquet file has a mark only at its end)
    for item in stream:
        if isinstance(item, Mark):
            batch.marks.append(item)
            if stop.is_set():
                break
        elif isinstance(item, Idle):
            batch.idle = True
            yield batch
            batch = Batch()
        else:
            batch.rows.append(item)
            if stop.is_set():
                after_stop += 1
                if after_stop > MARK_EVERY:
                    break
            if len(batch.rows) >= size:
                yield batch
                batch = Batch()
    if batch.rows or batch.marks:
        yield batch


def _total_bytes(cfg: ProducerConfig, *, files: Sequence[InputFile], ledger: Ledger | None) -> int | None:
    if cfg.follow or STDIN in cfg.inputs or not cfg.progress:
        return None
    total = 0  # an input that changed since its position was saved is read whole: the bar ends early
    for file in files:
        saved = ledger.get(file.key) if ledger else None
        total += max(file.path.stat().st_size - (saved.offset if saved else 0), 0)
    return total


def _identity_in_use(clients: Clients, topic: str) -> PromptIdentity | None:
    """The identity of the first prompt on ``topic`` (None when it holds none)."""
    reader = clients.reader()
    try:
        return identity_in_use(reader, topic)
    finally:
        reader.close()
