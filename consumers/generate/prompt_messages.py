"""One prompt record → the messages it ends as: a generation record per sample, or dead letters saying why.

The worker loop only dispatches prompts and publishes what comes back; what a response becomes
(a record, a capped sample's dead letter, an invalid response's, a refused publish's) is here.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from eaglefeed.consumers.generate import records as recs
from eaglefeed.consumers.generate.inference import Generation, InferenceClient, affinity_key
from eaglefeed.consumers.generate.publish import Message
from eaglefeed.consumers.generate.records import generation_record, requests_for
from eaglefeed.consumers.generate.tokens import SpotCheck, VocabSizes
from eaglefeed.core.clients import Record
from eaglefeed.core.config import WorkerConfig
from eaglefeed.core.errors import InferenceError, SchemaError
from eaglefeed.core.metrics import WorkerMetrics
from eaglefeed.schemas import codec_for
from eaglefeed.schemas.deadletter import dead_letter_for

log = logging.getLogger(__name__)


class PromptMessages:
    """Send a prompt's requests and turn the answers into the messages to publish.

    Args:
        cfg: the worker's settings (topics, schema version, ``--on-capped``, worker id).
        client: the inference client (routing, retries, concurrency).
        vocab: the vocabulary bounds and EOS ids of the prompts' tokenizers.
        metrics: the worker's metrics.
    """

    def __init__(self, *, cfg: WorkerConfig, client: InferenceClient, vocab: VocabSizes,
                 metrics: WorkerMetrics) -> None:
        self.cfg = cfg
        self.client = client
        self.vocab = vocab
        self.metrics = metrics
        self.generations = codec_for("generation", cfg.generation_schema_version)
        self.spot_check = SpotCheck(vocab=vocab, every=cfg.tokenizer_spot_check,
                                    on_outcome=metrics.spot_checked)

    async def for_prompt(self, rec: Record, prompt: dict[str, Any]) -> list[Message]:
        """Every sample of ``prompt`` generated: their records, or dead letters.

        Raises:
            ConfigError: the prompt's tokenizer cannot be loaded here (stop, never dead-letter).
        """
        vocab = await self.vocab.size_for(prompt["tokenizer_id"])
        # 1 prompt in N: the servers re-tokenize its text meanwhile (it never delays the others)
        parts, _ = await asyncio.gather(
            asyncio.gather(*(self._request(rec, prompt, indexes, params, vocab)
                             for indexes, params in requests_for(prompt, self.cfg.samples_mode))),
            self.spot_check.check(prompt))
        return [msg for part in parts for msg in part]

    async def _request(self, rec: Record, prompt: dict[str, Any], indexes: list[int], params: dict[str, Any],
                       vocab: int | None) -> list[Message]:
        pid = prompt["prompt_id"]
        seeds = recs.sample_seeds(prompt, indexes) if len(indexes) > 1 else None
        try:
            samples = await self.client.generate(prompt["input_ids"], params, rid=f"{pid}-{indexes[0]}",
                                                 vocab_size=vocab, on_retry=self._retried, seeds=seeds,
                                                 eos_id=self.vocab.eos_id(prompt["tokenizer_id"]),
                                                 # every turn of a conversation to one server: its cache
                                                 affinity=affinity_key(prompt))
        except InferenceError as exc:
            attempts = exc.attempts
            return [self.dead_letter(rec, exc.kind, str(exc), attempts, f"{pid}:{i}") for i in indexes]
        messages: list[Message] = []
        topic = self.cfg.kafka.generations_topic
        try:
            for index, gen in zip(indexes, samples.generations, strict=True):
                if gen.capped_at is not None:
                    capped = self._capped(rec, prompt, index, gen, samples.attempts)
                    if capped is not None:
                        messages.append(capped)
                        continue
                record = generation_record(prompt, index, gen, samples.info, params, self.cfg.worker_id)
                messages.append((topic, record["id"].encode(), self.generations.encode(record)))
        except (SchemaError, ValueError, TypeError) as exc:
            # A response field our contract cannot hold (a huge matched_stop, bad text): never
            # stop the worker on it, or every restart would stall on the same prompt.
            return [self.dead_letter(rec, "invalid_response", f"response does not fit the record: {exc}",
                                      1, f"{pid}:{i}") for i in indexes]
        if recs.identical_samples(samples.generations, params):  # one seed shared by n samples
            self.metrics.identical_samples.inc()
            log.warning("the %d samples of %s are identical at temperature > 0: one seed for all",
                        len(indexes), pid)
        for gen in samples.generations:
            self.metrics.generated_tokens.inc(len(gen.output_ids))
            self.metrics.output_tokens.observe(len(gen.output_ids))
        return messages

    def _capped(self, rec: Record, prompt: dict[str, Any], index: int, gen: Generation,
                attempts: int) -> Message | None:
        """A sample the engine cut below max_new_tokens: its dead letter, or None to keep it (--on-capped)."""
        if self.cfg.on_capped == "keep":
            self.metrics.capped.labels("kept").inc()
            return None
        self.metrics.capped.labels("dead_letter").inc()
        return self.dead_letter(rec, "capped", recs.capped_message(prompt, gen), attempts,
                                 f"{prompt['prompt_id']}:{index}")

    def rejected(self, rec: Record, msg: Message, exc: BaseException) -> Message | None:
        """A generation the broker refused for good (e.g. too large) becomes its dead letter."""
        if msg[0] == self.cfg.kafka.dead_letter_topic:
            return None  # a dead letter refused for good: nothing smaller to send, keep trying
        record_id = msg[1].decode(errors="replace") if msg[1] else None
        return self.dead_letter(rec, "publish_rejected", f"the broker refused the record: {exc!r}", 1,
                                 record_id)

    def dead_letter(self, rec: Record, kind: str, message: str, attempts: int,
                    record_id: str | None) -> Message:
        """The dead letter of ``rec`` (or of its sample ``record_id``), logged and counted by ``kind``."""
        log.warning("dead letter (%s) for %s-%d@%d: %s", kind, rec.topic, rec.partition, rec.offset, message)
        self.metrics.dead_letters.labels(kind).inc()
        value = dead_letter_for(rec, stage="generate", kind=kind, message=message, record_id=record_id,
                                attempts=attempts)
        return (self.cfg.kafka.dead_letter_topic, rec.key, value)

    def _retried(self, kind: str) -> None:
        self.metrics.retries.labels(kind).inc()
