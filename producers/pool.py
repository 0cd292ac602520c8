"""Build batches in this process or in render processes; results come back in submission order."""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from types import TracebackType

from eaglefeed.chat.toolcalls import choose_format
from eaglefeed.core.config import PromptSettings
from eaglefeed.core.errors import ConfigError, RenderProcessError
from eaglefeed.core.tokenizer import load_tokenizer, remote_code_class
from eaglefeed.producers.build import BatchResult, PromptBuilder
from eaglefeed.producers.sources import Mark, SourceRow

log = logging.getLogger(__name__)


@dataclass
class Batch:
    """Rows to build, the marks reached after them, and whether the input went idle after them."""

    rows: list[SourceRow] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    idle: bool = False


class RenderPool:
    """Runs :class:`PromptBuilder` on batches, keeping at most ``window`` batches in flight.

    Args:
        settings: the prompt settings (each render process builds its own builder from them).
        workers: render processes; 0 builds in this process.

    Raises:
        ConfigError: the tokenizer cannot be loaded here (with ``workers`` > 0, only a tokenizer
            that names its own code is tried here: a refusal comes before Kafka is touched).
    """

    def __init__(self, settings: PromptSettings, *, workers: int = 0) -> None:
        self._pending: deque[tuple[Batch, Future[BatchResult]]] = deque()
        self._builder: PromptBuilder | None = None
        self._executor: ProcessPoolExecutor | None = None
        if workers <= 0:
            self._builder = PromptBuilder(settings)
            self.window = 1
        else:
            if not settings.trust_remote_code and remote_code_class(settings.tokenizer):
                # a refusal stops the run here, before Kafka, not in the first batch's render process
                load_tokenizer(settings.tokenizer, trust_remote_code=False)
            # spawn, not fork: the parent may already run threads (Kafka IO, tokenizers' pool).
            self._executor = ProcessPoolExecutor(max_workers=workers,
                                                 mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=_init_worker, initargs=(settings,))
            self.window = 2 * workers
        if settings.conversations:
            self._log_tool_format(settings)

    def _log_tool_format(self, settings: PromptSettings) -> None:
        """Say at start-up which tool-call format the conversations' turns will be read with."""
        if self._builder is not None:
            found = self._builder.tool_format
        else:  # the render processes choose the same; ask here too, to say it once
            tokenizer = load_tokenizer(settings.tokenizer, trust_remote_code=settings.trust_remote_code)
            try:
                found = choose_format(settings.tool_format, tokenizer)
            except ValueError as exc:
                raise ConfigError(str(exc)) from exc
        if found is None:
            return
        if found.name is None:
            log.warning("tool-call format: cannot tell (%s); a conversation with tools stops the run "
                        "(pass --tool-format)", found.why)
        else:
            log.info("tool-call format: %s (%s)", found.name, found.why)

    def submit(self, batch: Batch) -> None:
        """Start building ``batch``."""
        if self._executor is None or not batch.rows:
            done: Future[BatchResult] = Future()
            builder = self._builder
            done.set_result(builder.build(batch.rows) if builder and batch.rows else BatchResult())
            self._pending.append((batch, done))
        else:
            self._pending.append((batch, self._executor.submit(_build, batch.rows)))

    def results(self, *, drain: bool = False) -> Iterator[tuple[Batch, BatchResult]]:
        """Finished batches in submission order; waits while more than ``window`` are in flight.

        Args:
            drain: wait for every batch in flight.

        Raises:
            RenderProcessError: when a render process died.
            EaglefeedError: what a render process raised (e.g. a ConfigError from the tokenizer).
        """
        while self._pending and (drain or len(self._pending) > self.window or self._pending[0][1].done()):
            batch, future = self._pending.popleft()
            try:
                result = future.result()
            except BrokenProcessPool as exc:
                raise RenderProcessError(f"a render process died: {exc}") from exc
            yield batch, result

    def close(self) -> None:
        """Stop the render processes (batches still in flight are dropped)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> RenderPool:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


_worker_builder: PromptBuilder | None = None
_worker_error: Exception | None = None


def _init_worker(settings: PromptSettings) -> None:
    # The parent handles Ctrl-C and stops cleanly; a render process must not die halfway through.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one process per core already
    global _worker_builder, _worker_error
    try:
        _worker_builder = PromptBuilder(settings)
    except ConfigError as exc:  # its one line as it is (e.g. "pass --trust-remote-code")
        _worker_error = exc
    except Exception as exc:  # noqa: BLE001 - reported on the first batch, where the parent sees it
        _worker_error = RenderProcessError(f"a render process could not start: {exc}")


def _build(rows: list[SourceRow]) -> BatchResult:
    if _worker_builder is None:
        raise _worker_error or RenderProcessError("the render process did not start")
    return _worker_builder.build(rows)
