"""One thread that runs blocking calls for the event loop, in submission order."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")
_Call = tuple[concurrent.futures.Future[Any], Callable[[], Any]]


class OneThread:
    """One daemon thread that runs blocking calls in order and hands their results to the event loop.

    The worker has three: the consumer's (kafka-python's consumer is not thread-safe), the acked
    producer's sends (``send()`` blocks while metadata is missing or the buffer is full) and the
    transactional producer's calls. A daemon, unlike a ``ThreadPoolExecutor``'s worker: a call that
    never returns (kafka-python's ``commit_transaction`` waits without a timeout) must not keep the
    process from exiting. The thread starts with the first call; a call cancelled before it
    started never runs, and one queued after :meth:`shutdown` never runs either.

    Args:
        name: the thread's name.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        weakref.finalize(self, self._calls.put, None)  # forgotten without shutdown: the thread ends too

    async def __call__(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``fn(*args, **kwargs)`` on the thread, after the calls queued before it; await its result."""
        if self._thread is None:
            self._thread = threading.Thread(target=_run, args=(self._calls,), name=self.name, daemon=True)
            self._thread.start()
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._calls.put((future, functools.partial(fn, *args, **kwargs)))
        return await asyncio.wrap_future(future)

    def shutdown(self, *, wait: bool) -> None:
        """Let the thread end once the calls queued before are done.

        Args:
            wait: block until they are (never for a thread that may be stuck for good).
        """
        self._calls.put(None)
        if wait and self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()


def _run(calls: queue.SimpleQueue[_Call | None]) -> None:
    while (item := calls.get()) is not None:
        future, call = item
        if not future.set_running_or_notify_cancel():
            continue  # given up before it started
        try:
            future.set_result(call())
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
            future.set_exception(exc)
