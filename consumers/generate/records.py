"""One prompt record → its ``/generate`` requests → the messages it ends as.

The pure builders come first (sampling params, requests, GenerationRecords); then
:class:`PromptMessages`, which turns a prompt's responses into a generation record per sample or
dead letters saying why. The worker loop only dispatches prompts and publishes what comes back.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from eaglefeed.chat.seeds import sample_seed
from eaglefeed.consumers.generate.inference import (
    NEUTRAL,
    TEXT_ONLY,
    Generation,
    InferenceClient,
    ServerInfo,
    ServerModels,
    affinity_key,
)
from eaglefeed.consumers.generate.publish import Message
from eaglefeed.consumers.generate.tokens import SpotCheck, VocabSizes
from eaglefeed.core.clients import Record
from eaglefeed.core.config import WorkerConfig
from eaglefeed.core.errors import InferenceError, SchemaError
from eaglefeed.core.metrics import WorkerMetrics
from eaglefeed.schemas import PROMPT, codec_for
from eaglefeed.schemas.deadletter import dead_letter_for


def sampling_params(prompt: dict[str, Any], index: int, *, n: int = 1) -> dict[str, Any]:
    """The explicit SGLang sampling params for sample ``index`` (or for all ``n`` samples).

    Neutral penalties and the other settings of ``neutral.NEUTRAL`` are always sent, so a
    server's preferred or model-default sampling cannot apply without the row saying so.
    """
    sp = prompt["sampling_params"]
    params: dict[str, Any] = {
        **NEUTRAL,
        "max_new_tokens": sp["max_new_tokens"], "temperature": sp["temperature"],
        "top_p": sp["top_p"], "top_k": sp["top_k"], "min_p": sp["min_p"],
        "sampling_seed": sample_seed(prompt["prompt_id"], sp["seed"], index),
        **TEXT_ONLY,  # keep special tokens and stops visible in `text` for debugging
        "stop_token_ids": list(sp["stop_token_ids"]), "n": n,
    }
    return params


def requests_for(prompt: dict[str, Any], mode: str,
                 samples: list[int] | None = None) -> list[tuple[list[int], dict[str, Any]]]:
    """The requests a prompt needs for ``samples`` (default: all): (sample indexes, sampling params) each.

    ``mode`` is ``separate``: one request per sample, each with its own ``sampling_seed``
    (``eaglefeed.chat.seeds``); or ``n``: one request with ``n`` samples and sample 0's seed,
    which SGLang applies to all of them. On a deterministic SGLang (``--enable-deterministic-inference``)
    that would make the ``n`` samples identical, so the engine sends that request as a batch of
    ``n`` copies, each with its own seed (:func:`sample_seeds`; ``engines.SGLangEngine``). A prompt
    published again with more samples asks only for those not durable yet (``samples``); ``n`` then
    takes the first one's seed.
    """
    indexes = list(range(prompt["num_samples"])) if samples is None else samples
    if mode == "n" and len(indexes) > 1:
        return [(indexes, sampling_params(prompt, indexes[0], n=len(indexes)))]
    return [([i], sampling_params(prompt, i)) for i in indexes]


def states_start(prompt: dict[str, Any]) -> int:
    """The first position of ``prompt`` whose hidden states its row stores (0 but in a ``tokens`` lane).

    A ``tokens`` turn's prompt begins with the lane's previous turn (its prompt + output,
    ``history_len`` ids), whose file holds that turn's prompt + output[:-1]: this row keeps the
    positions from that turn's last id on, so a lane's files tile its final turn exactly once.
    """
    text = prompt.get("conversation")
    if not text:
        return 0
    try:
        state = json.loads(text)
    except (ValueError, RecursionError):
        return 0
    history = state.get("history_len") if isinstance(state, dict) and state.get("mode") == "tokens" else 0
    return history - 1 if type(history) is int and 0 < history <= len(prompt["input_ids"]) else 0


def sample_seeds(prompt: dict[str, Any], indexes: list[int]) -> tuple[int, ...]:
    """The ``sampling_seed`` of each sample of ``indexes`` (what separate requests would send)."""
    base = prompt["sampling_params"]["seed"]
    return tuple(sample_seed(prompt["prompt_id"], base, i) for i in indexes)


def capped_message(prompt: dict[str, Any], gen: Generation) -> str:
    """The dead-letter message of a sample the engine cut below max_new_tokens (``--on-capped``)."""
    wanted = prompt["sampling_params"]["max_new_tokens"]
    return (f"the engine at {gen.endpoint} finished with length after {gen.capped_at} of "
            f"max_new_tokens={wanted} tokens (prompt {len(prompt['input_ids'])} tokens): it capped the "
            "output (context length, KV cache or a server-wide limit such as SGLANG_MAX_NEW_TOKENS_LIMIT); "
            "--on-capped keep (the default) writes such rows with capped_at")


def identical_samples(gens: list[Generation], params: dict[str, Any]) -> bool:
    """Whether several samples drawn at temperature > 0 came back identical (one shared seed)."""
    if len(gens) < 2 or float(params.get("temperature", 0.0)) < 1e-6 or params.get("top_k") == 1:
        return False
    return all(gen.output_ids == gens[0].output_ids for gen in gens[1:])


def invalid_reason(prompt: dict[str, Any]) -> str | None:
    """Why a decoded PromptRecord cannot be generated, or None when it can."""
    if not prompt["input_ids"]:
        return "input_ids is empty"
    if not 1 <= prompt["num_samples"] <= 1024:
        return f"num_samples={prompt['num_samples']} is outside [1, 1024]"
    if prompt["sampling_params"]["max_new_tokens"] < 1:
        return "max_new_tokens must be at least 1"
    return None


def generation_record(prompt: dict[str, Any], index: int, gen: Generation, info: ServerInfo,
                      params: dict[str, Any], worker_id: str) -> dict[str, Any]:
    """Build the GenerationRecord of sample ``index``: exactly the ids sent and received.

    The server's info names the engine that generated it (``sglang``, ``vllm``); the codec
    packs the id lists into int32 bytes (GenerationRecord v2) and carries the prompt's
    ``conversation`` state unchanged (v3; a codec of an older version drops it).
    """
    matched = gen.matched_stop
    return {
        "id": f"{prompt['prompt_id']}:{index}",
        "prompt_id": prompt["prompt_id"],
        "sample_index": index,
        "prompt_ids": prompt["input_ids"],
        "output_ids": gen.output_ids,
        "finish_reason": gen.finish_reason,
        "matched_stop": matched if isinstance(matched, (int, str)) else None,
        "prompt_tokens": gen.prompt_tokens,
        "completion_tokens": gen.completion_tokens,
        "cached_tokens": gen.cached_tokens,
        "latency_seconds": gen.latency_seconds,
        "endpoint": gen.endpoint,
        "model_path": info.model_path,
        "engine": info.engine,
        "engine_version": info.engine_version,
        "worker_id": worker_id,
        "source": prompt["source"],
        "source_row": prompt["source_row"],
        "turn_index": prompt["turn_index"],
        # a sample sent with its own seed inside a batch (n on a deterministic SGLang) records it
        "sampling_params": json.dumps(params if gen.sampling_seed is None else
                                      {**params, "n": 1, "sampling_seed": gen.sampling_seed}, sort_keys=True),
        "chat_template_kwargs": prompt["chat_template_kwargs"],
        "tokenizer_id": prompt["tokenizer_id"],
        "tokenizer_hash": prompt["tokenizer_hash"],
        "chat_template_hash": prompt["chat_template_hash"],
        "prompt_created_at": prompt["created_at"],
        "created_at": int(time.time() * 1000),
        # the conversation state rides along untouched: the converse stage continues from it
        "conversation": prompt.get("conversation"),
        "capped_at": gen.capped_at,  # v4: the engine's own cap (a row exists only with --on-capped keep)
        "weight_version": gen.weight_version or info.weight_version,  # v4: the response's, else the server's
        "seeded": info.seeded,  # v4: whether the server honours sampling_seed
        # v5: the checked hidden-state file of prompt + output[:-1], when the run captures them
        "hidden_states": gen.hidden_states.to_record() if gen.hidden_states is not None else None,
    }


# One prompt record → the messages it ends as: a generation record per sample, or dead letters saying why.
#
# The worker loop only dispatches prompts and publishes what comes back; what a response becomes
# (a record, a capped sample's dead letter, an invalid response's, a refused publish's) is here.

log = logging.getLogger(__name__)


class PromptMessages:
    """Send a prompt's requests and turn the answers into the messages to publish.

    Args:
        cfg: the worker's settings (topics, schema version, ``--on-capped``, worker id).
        client: the inference client (routing, retries, concurrency).
        vocab: the vocabulary bounds and EOS ids of the prompts' tokenizers.
        metrics: the worker's metrics.
        models: what refuses servers of another model than the prompts' (None: not checked).
    """

    def __init__(self, *, cfg: WorkerConfig, client: InferenceClient, vocab: VocabSizes,
                 metrics: WorkerMetrics, models: ServerModels | None = None) -> None:
        self.cfg = cfg
        self.client = client
        self.vocab = vocab
        self.models = models
        self.metrics = metrics
        self.generations = codec_for("generation", cfg.generation_schema_version)
        self.spot_check = SpotCheck(vocab=vocab, every=cfg.tokenizer_spot_check,
                                    on_outcome=metrics.spot_checked)

    async def for_prompt(self, rec: Record, prompt: dict[str, Any],
                         samples: list[int] | None = None) -> list[Message]:
        """The ``samples`` of ``prompt`` (default: all) generated: their records, or dead letters.

        Raises:
            ConfigError: the prompt's tokenizer cannot be loaded here, or no server serves its
                model (stop, never dead-letter).
        """
        if self.models is not None:
            await self.models.check(prompt.get("model"))
        vocab = await self.vocab.size_for(prompt["tokenizer_id"])
        # 1 prompt in N: the servers re-tokenize its text meanwhile (it never delays the others)
        parts, _ = await asyncio.gather(
            asyncio.gather(*(self._request(rec, prompt, indexes, params, vocab)
                             for indexes, params in requests_for(prompt, self.cfg.samples_mode, samples))),
            self.spot_check.check(prompt))
        return [msg for part in parts for msg in part]

    async def _request(self, rec: Record, prompt: dict[str, Any], indexes: list[int], params: dict[str, Any],
                       vocab: int | None) -> list[Message]:
        pid = prompt["prompt_id"]
        seeds = sample_seeds(prompt, indexes) if len(indexes) > 1 else None
        try:
            samples = await self.client.generate(prompt["input_ids"], params, rid=f"{pid}-{indexes[0]}",
                                                 vocab_size=vocab, on_retry=self._retried, seeds=seeds,
                                                 eos_id=self.vocab.eos_id(prompt["tokenizer_id"]),
                                                 # every turn of a conversation to one server: its cache
                                                 affinity=affinity_key(prompt),
                                                 capture_start=states_start(prompt))
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
        if identical_samples(samples.generations, params):  # one seed shared by n samples
            self.metrics.identical_samples.inc()
            log.warning("the %d samples of %s are identical at temperature > 0: one seed for all",
                        len(indexes), pid)
        for gen in samples.generations:
            self.metrics.generated_tokens.inc(len(gen.output_ids))
            if gen.hidden_states is not None:
                self.metrics.hidden_state_bytes.inc(gen.hidden_states.bytes)
            self.metrics.output_tokens.observe(len(gen.output_ids))
        return messages

    def _capped(self, rec: Record, prompt: dict[str, Any], index: int, gen: Generation,
                attempts: int) -> Message | None:
        """A sample the engine cut below max_new_tokens: its dead letter, or None to keep it (--on-capped)."""
        if self.cfg.on_capped == "keep":
            self.metrics.capped.labels("kept").inc()
            return None
        self.metrics.capped.labels("dead_letter").inc()
        return self.dead_letter(rec, "capped", capped_message(prompt, gen), attempts,
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
                                attempts=attempts, codec=PROMPT)  # names the prompt's input line
        return (self.cfg.kafka.dead_letter_topic, rec.key, value)

    def _retried(self, kind: str) -> None:
        self.metrics.retries.labels(kind).inc()
