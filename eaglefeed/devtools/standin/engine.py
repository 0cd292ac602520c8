"""The stand-in's engine: plans completions, tracks in-flight rids, feeds the scheduler."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from eaglefeed.devtools.standin.config import StandinConfig
from eaglefeed.devtools.standin.faults import FaultPlan
from eaglefeed.devtools.standin.hidden_states import first_row_position
from eaglefeed.devtools.standin.metrics import StandinMetrics
from eaglefeed.devtools.standin.output import Completion, OutputModel, plan_completion
from eaglefeed.devtools.standin.parsing import GenerateRequest, InvalidRequestError, new_rid
from eaglefeed.devtools.standin.prefix_cache import PrefixCache
from eaglefeed.devtools.standin.sampling import SamplingParams
from eaglefeed.devtools.standin.scheduler import (
    BatchingScheduler,
    ImmediateScheduler,
    Scheduler,
    Sequence,
    StepCosts,
)
from eaglefeed.devtools.standin.vocab import Vocab

ABORT_FAULT_MESSAGE = "Aborted by eaglefeed stand-in fault injection."
ABORT_REQUEST_MESSAGE = "Aborted by /abort_request."
SHUTDOWN_MESSAGE = "The server is shutting down."
DISCONNECT_MESSAGE = "Request is disconnected from the client side. Abort request."


@dataclass(eq=False, slots=True, kw_only=True)
class Job:
    """The sequences of one ``/generate`` call plus what is needed to answer it.

    Attributes:
        request: the parsed request.
        seqs: expanded sequences, prompt-major.
        params: sampling parameters aligned with ``seqs``.
        prompts: prompt ids aligned with ``seqs``.
        notify: the event the scheduler sets when any of ``seqs`` progresses.
        hidden_first: aligned with ``seqs``: the first prompt position of the returned prefill
            block when ``return_hidden_states`` asked for this sequence, else None.
    """

    request: GenerateRequest
    seqs: list[Sequence]
    params: list[SamplingParams]
    prompts: list[list[int]]
    notify: asyncio.Event | None
    hidden_first: list[int | None] | None = None

    @property
    def finished(self) -> bool:
        """True once every sequence is finished."""
        return all(seq.finished for seq in self.seqs)


class Engine:
    """Everything behind the HTTP routes that holds state."""

    def __init__(self, *, config: StandinConfig, vocab: Vocab) -> None:
        """Build the engine; ``start()`` must run inside the event loop.

        Args:
            config: the server configuration.
            vocab: the loaded tokenizer facts.
        """
        self.config = config
        self.vocab = vocab
        self.started_at = time.monotonic()
        self.model = OutputModel(
            output_len_mean=config.output_len_mean,
            output_len_sigma=config.output_len_sigma,
            think_fraction=config.think_fraction,
            tool_call_fraction=config.tool_call_fraction,
            parallel_tool_call_fraction=config.parallel_tool_call_fraction,
            length_fraction=config.length_fraction,
            random_seed=config.random_seed,
            tool_call_format=config.tool_call_format,
            seed_mode=config.seed_mode,
        )
        self.cache = PrefixCache(
            block_size=config.prefix_cache_block_size, capacity_tokens=config.cache_tokens
        )
        self.scheduler: Scheduler = _make_scheduler(config)
        self.metrics = StandinMetrics.create(
            model_name=config.model_name,
            scheduler=self.scheduler,
            total_tokens=config.total_num_tokens,
            started_at=self.started_at,
        )
        self.faults = FaultPlan(rates=config.faults)
        self._in_flight: set[str] = set()
        self._stopping = asyncio.Event()
        self._immediate = isinstance(self.scheduler, ImmediateScheduler)

    def start(self) -> None:
        """Start the scheduler task."""
        self.scheduler.start()

    @property
    def stopping(self) -> bool:
        """True once shutdown has begun (new ``/generate`` calls get 503)."""
        return self._stopping.is_set()

    def begin_shutdown(self) -> None:
        """Abort every sequence and end every injected hang, so in-flight calls answer at once."""
        self._stopping.set()
        self.scheduler.abort(lambda seq: True, SHUTDOWN_MESSAGE)

    async def stop(self) -> None:
        """Stop the scheduler and abort what is left."""
        await self.scheduler.stop()

    async def hang(self, seconds: float) -> None:
        """Sleep for an injected hang; a shutdown ends it early."""
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    def admit(self, request: GenerateRequest, *, abort_fault: bool = False) -> Job:
        """Plan every sample, register the rids and hand the sequences to the scheduler.

        Args:
            request: the parsed request.
            abort_fault: cut every output in half and finish it with an abort.

        Raises:
            InvalidRequestError: a rid is already in flight.
            QueueFullError: the waiting queue is full.
        """
        for item in request.items:
            if item.rid in self._in_flight:
                raise InvalidRequestError(f"Duplicate request ID detected: {item.rid}")
        notify = None if self._immediate else asyncio.Event()
        now = time.monotonic()
        seqs, params, prompts, hidden_first = [], [], [], []
        asked = request.return_hidden_states or (False,) * len(request.items)
        for item, wants_states in zip(request.items, asked, strict=True):
            if request.n > 1:
                self.cache.match_and_insert(item.input_ids)
            for sample in range(request.n):
                completion = plan_completion(
                    vocab=self.vocab,
                    model=self.model,
                    input_ids=item.input_ids,
                    params=item.params,
                    max_new_tokens=item.max_new_tokens,
                    sample_index=sample,
                )
                if abort_fault:
                    completion = _abort_half(completion)
                seqs.append(
                    Sequence(
                        rid=item.rid if request.n == 1 else new_rid(),
                        parent_rid=None if request.n == 1 else item.rid,
                        prompt_len=len(item.input_ids),
                        cached_tokens=self.cache.match_and_insert(item.input_ids),
                        completion=completion,
                        arrival=now,
                        notify=notify,
                    )
                )
                params.append(item.params)
                prompts.append(item.input_ids)
                hidden_first.append(
                    first_row_position(len(item.input_ids), seqs[-1].cached_tokens,
                                       self.config.chunked_prefill_size)
                    if wants_states else None
                )
        self.scheduler.submit(seqs)
        self._in_flight.update(item.rid for item in request.items)
        return Job(request=request, seqs=seqs, params=params, prompts=prompts, notify=notify,
                   hidden_first=hidden_first)

    async def wait(self, job: Job) -> None:
        """Wait until every sequence of ``job`` is finished."""
        while job.notify is not None and not job.finished:
            job.notify.clear()
            if job.finished:
                break
            await job.notify.wait()

    def release(self, job: Job) -> None:
        """Forget ``job``'s rids, abort sequences still running (client gone) and record metrics."""
        unfinished = {id(seq) for seq in job.seqs if not seq.finished}
        if unfinished:
            self.scheduler.abort(lambda seq: id(seq) in unfinished, DISCONNECT_MESSAGE)
        for item in job.request.items:
            self._in_flight.discard(item.rid)
        for seq, prompt in zip(job.seqs, job.prompts, strict=True):
            self.metrics.observe(seq)
            # SGLang caches a finished request's prompt and output (all but the last output token,
            # whose KV was never computed), so the next turn of a conversation hits on this server.
            if seq.emitted > 1:
                self.cache.insert([*prompt, *seq.output_ids[:-1]])

    def abort(self, *, rid: str, abort_all: bool) -> int:
        """Abort by rid, or everything.

        As in SGLang 0.5.23, the client's rid of an ``n > 1`` request stops none of its samples:
        each sample runs under a regenerated rid (``tokenizer_manager`` ``_handle_batch_request``),
        and ``abort_request`` of an rid it does not track returns without a word.
        """
        if abort_all:
            return self.scheduler.abort(lambda seq: True, ABORT_REQUEST_MESSAGE)
        if not rid:
            return 0
        return self.scheduler.abort(lambda seq: seq.rid == rid, ABORT_REQUEST_MESSAGE)

    async def health_generate(self) -> None:
        """Run a one-token generation through the scheduler (not counted in metrics)."""
        notify = None if self._immediate else asyncio.Event()
        completion = Completion([self.vocab.normal_ids[0]], {"type": "length", "length": 1})
        seq = Sequence(
            rid=f"HEALTH_CHECK_{new_rid()}",
            prompt_len=1,
            completion=completion,
            arrival=time.monotonic(),
            notify=notify,
        )
        self.scheduler.submit([seq], force=True)
        while notify is not None and not seq.finished:
            notify.clear()
            await notify.wait()

    def server_state(self) -> dict[str, Any]:
        """Return ``internal_states[0]`` of ``/server_info``."""
        return {
            "last_gen_throughput": self.metrics.throughput.rate(),
            "avg_spec_accept_length": None,
            "waiting_queue_size": self.scheduler.num_waiting,
            "running_batch_size": self.scheduler.num_running,
            "memory_usage": {"token_usage": self.scheduler.used_tokens() / self.config.total_num_tokens},
        }


def _make_scheduler(config: StandinConfig) -> Scheduler:
    if config.latency_model == "none":
        return ImmediateScheduler(max_running=config.max_running_requests)
    costs = StepCosts(
        prefill_ms_per_token=config.prefill_ms_per_token,
        decode_step_ms=config.decode_step_ms,
        decode_step_ms_per_running=config.decode_step_ms_per_running,
    )
    return BatchingScheduler(
        max_running=config.max_running_requests, max_queued=config.max_queued_requests, costs=costs
    )


def _abort_half(completion: Completion) -> Completion:
    return completion.truncated(
        len(completion.output_ids) // 2, {"type": "abort", "message": ABORT_FAULT_MESSAGE}
    )
