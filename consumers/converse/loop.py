"""``eaglefeed converse``: generations of conversation prompts → the next turns' prompts.

Stateless: each generation carries its conversation's state, so any member of the group can
continue any conversation. The delivery argument is in ``eaglefeed.consumers.converse.checkpoint`` and
docs/CONVERSATION_STAGE.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka.structs import TopicPartition
from prometheus_client import CollectorRegistry

from eaglefeed.chat.toolcalls import TOOL_FORMAT_CHOICES
from eaglefeed.consumers.converse.checkpoint import ConverseCheckpoint
from eaglefeed.consumers.converse.rebalance import Rebalance
from eaglefeed.consumers.converse.renderers import Renderers
from eaglefeed.consumers.converse.step import Output, Stepper
from eaglefeed.core.clients import Clients, Consumer, KafkaClients, Record
from eaglefeed.core.config import ConverseConfig
from eaglefeed.core.errors import ConfigError, SchemaError, UnknownSchemaError
from eaglefeed.core.lifecycle import StopSignal
from eaglefeed.core.metrics import ConverseMetrics
from eaglefeed.core.stage import IdleClock, group_lag, stage_metrics
from eaglefeed.core.watchdog import StallWatchdog
from eaglefeed.schemas import DEAD_LETTER, GENERATION

log = logging.getLogger(__name__)

POLL_MS = 200
MAX_POLL_RECORDS = 200


@dataclass
class ConverseSummary:
    """Counts of one converse run."""

    records: int = 0
    continued: int = 0
    ended: dict[str, int] = field(default_factory=dict)  # "outcome/reason" -> lanes
    dead_lettered: int = 0
    lag_at_exit: int | None = None

    def describe(self) -> str:
        """One line for the operator."""
        ended = ", ".join(f"{k}={v}" for k, v in sorted(self.ended.items()))
        return (f"converse: read {self.records} records; published {self.continued} next-turn prompts; "
                f"ended {sum(self.ended.values())} lanes" + (f" ({ended})" if ended else "")
                + f"; dead-lettered {self.dead_lettered}"
                + (f"; lag at exit {self.lag_at_exit}" if self.lag_at_exit is not None else ""))


def run_converse(cfg: ConverseConfig, *, stop: StopSignal | None = None,
                 registry: CollectorRegistry | None = None,
                 clients: Clients | None = None) -> ConverseSummary:
    """Continue conversations until stopped (or caught up for ``cfg.exit_when_idle`` seconds).

    Args:
        cfg: the stage's settings.
        stop: ask for a clean stop (what was processed is acknowledged and committed first).
        registry: where the metrics go (a fresh one by default).
        clients: where the Kafka clients come from (the real broker of ``cfg.kafka`` by default).

    Returns:
        the counts of what this run did.

    Raises:
        ConfigError: a prompt's tokenizer cannot be loaded here.
        DeliveryError: the broker did not acknowledge an output.
    """
    if cfg.tool_format not in TOOL_FORMAT_CHOICES:
        raise ConfigError(f"--tool-format must be one of {', '.join(TOOL_FORMAT_CHOICES)}, "
                          f"not {cfg.tool_format!r}")
    stop = stop or StopSignal()
    clients = clients or KafkaClients(kafka=cfg.kafka)
    kafka = cfg.kafka
    inputs = [kafka.generations_topic, kafka.dead_letter_topic]
    summary = ConverseSummary()
    with stage_metrics(ConverseMetrics.create, kafka=kafka, stage="converse", group=cfg.group_id,
                       topic=kafka.generations_topic, port=cfg.metrics_port, registry=registry) as metrics:
        if not clients.wait_for_topics([*inputs, kafka.conversations_topic], stop, cfg.exit_when_idle):
            return summary
        consumer = clients.consumer(cfg.group_id, max_poll_records=MAX_POLL_RECORDS)
        producer = clients.producer()
        renderers = Renderers(override=cfg.tokenizer, trust_remote_code=cfg.trust_remote_code)
        stepper = Stepper(renderers=renderers, metrics=metrics,
                          tool_format=cfg.tool_format, max_prompt_tokens=cfg.max_prompt_tokens)
        checkpoint = ConverseCheckpoint(consumer=consumer, producer=producer, kafka=kafka)
        listener = Rebalance()
        clients.subscribe(consumer, inputs, listener)

        def rejoin() -> None:  # see eaglefeed.consumers.converse.rebalance
            consumer.unsubscribe()
            clients.subscribe(consumer, inputs, listener)

        watchdog = StallWatchdog(stage="converse", after=cfg.stall_seconds, rejoin=rejoin,
                                 count=lambda action: metrics.stall_recoveries.labels(action).inc())
        backlog = clients.backlog()
        try:
            _consume(consumer, stepper, checkpoint, summary, kafka_generations=kafka.generations_topic,
                     stop=stop, idle=IdleClock(seconds=cfg.exit_when_idle),
                     lag=lambda: group_lag(consumer, backlog, group=cfg.group_id, topics=inputs),
                     rejoin=lambda: rejoin() if listener.stuck() else None, watchdog=watchdog)
        finally:
            try:
                consumer.close()
            finally:
                producer.close()
                backlog.close()
        summary.continued = stepper.counts.continued
        summary.ended = dict(stepper.counts.ended)
        summary.dead_lettered = stepper.counts.dead_lettered
        return summary


def _consume(consumer: Consumer, stepper: Stepper, checkpoint: ConverseCheckpoint,
             summary: ConverseSummary, *, kafka_generations: str, stop: StopSignal, idle: IdleClock,
             lag: Callable[[], int | None], rejoin: Callable[[], None], watchdog: StallWatchdog) -> None:
    """Poll → step every record → send → acknowledge → commit, until stopped or caught up."""
    while not stop.is_set():
        rejoin()  # only when a group join was left unfinished
        batch = consumer.poll(timeout_ms=POLL_MS)
        watchdog.observe(consumer, batch)
        for tp, records in batch.items():
            for rec in records:
                checkpoint.send(_outputs(stepper, rec, generations=tp.topic == kafka_generations))
                checkpoint.processed(TopicPartition(tp.topic, tp.partition), rec.offset)
                summary.records += 1
        checkpoint.commit()  # before the next poll: a rebalance happens only inside poll()
        if not batch:
            checkpoint.commit_drained()  # past an exactly-once worker's last commit marker
        now = idle.now()
        if idle.observe(now, busy=bool(batch)):
            idle.probed(lag(), now)
        if idle.expired(now):
            summary.lag_at_exit = idle.lag
            break


def _outputs(stepper: Stepper, rec: Record, *, generations: bool) -> list[Output]:
    """What one input record makes the stage publish."""
    if rec.value is None:
        return []
    codec = GENERATION if generations else DEAD_LETTER
    try:
        decoded: dict[str, Any] = codec.decode(rec.value)
    except UnknownSchemaError as exc:
        if generations:
            # A newer writer (a rolling upgrade): the record may be a conversation's turn, whose lane
            # would otherwise never end. Keep its bytes to re-drive once this stage can read it.
            return [stepper.unreadable(rec, "unknown_schema", str(exc))]
        log.warning("skipping %s-%d@%d: %s", rec.topic, rec.partition, rec.offset, exc)
        return []
    except SchemaError as exc:
        # The sink dead-letters generations it cannot read; a second dead letter would say nothing new.
        log.warning("skipping %s-%d@%d: %s", rec.topic, rec.partition, rec.offset, exc)
        return []
    return stepper.generation(decoded, rec) if generations else stepper.dead_letter(decoded)
