"""One row's states for ``eaglefeed capture``: a file an earlier run left, else a prefill-only request."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import secrets
from dataclasses import dataclass
from pathlib import Path

import httpx

from eaglefeed.consumers.generate.inference import ServerPool, describe, raise_for_status, wait_for_file
from eaglefeed.core.capture import CaptureSettings
from eaglefeed.core.errors import ConfigError, FatalInferenceError, InferenceError, RetryableInferenceError
from eaglefeed.dataset import state_fill
from eaglefeed.dataset.hidden_states import HiddenStatesError, HiddenStatesRef
from eaglefeed.dataset.state_fill import MissingRow
from eaglefeed.ops.capture_options import CaptureOptions
from eaglefeed.ops.capture_summary import CaptureSummary

log = logging.getLogger("eaglefeed.ops.capture_states")  # the command's one logger, whichever module logs

NATIVE = "/inference/v1/generate"


@dataclass(frozen=True, kw_only=True)
class RowCapture:
    """How a run gets a row's checked reference: what it sends to, checks against, and counts in.

    Attributes:
        options: the run's options (attempts and backoff).
        store: the dataset's store folder (``root/hidden_states``).
        pool: the capture-enabled servers.
        http: the client the requests go over.
        settings: the capture settings, held to the rows that already have states.
        layers: the layers the servers capture (each file is checked against them).
        names: the store's files by row key (``state_fill.store_names``): earlier runs' files.
        summary: where captures, reuses, requests and failures are counted.
    """

    options: CaptureOptions
    store: Path
    pool: ServerPool
    http: httpx.AsyncClient
    settings: CaptureSettings
    layers: tuple[int, ...]
    names: dict[str, list[str]]
    summary: CaptureSummary

    async def ref(self, row: MissingRow) -> HiddenStatesRef | None:
        """The row's checked reference: its file from an earlier run, else a new capture; None: failed."""
        if not row.token_ids:
            self.summary.fail_rows(1, "empty", f"row {row.id} has no positions to capture")
            return None
        earlier = self.names.get(state_fill.row_key(row.id), [])
        for path in state_fill.find_existing(self.store, row.id, earlier):
            try:
                ref = await asyncio.to_thread(self._adopt, row, path)
            except (HiddenStatesError, OSError):
                continue  # another attempt's, or half a run's: left to gc
            self.summary.reused += 1
            return ref
        failure: InferenceError | None = None
        for attempt in range(1, self.options.max_attempts + 1):
            if attempt > 1:
                await asyncio.sleep(self._backoff(attempt, failure))
            try:
                ref = await self._capture(row)
            except RetryableInferenceError as exc:
                failure = exc
                log.debug("capture: row %s attempt %d: %s %s", row.id, attempt, exc.kind, exc)
                continue
            except FatalInferenceError as exc:
                failure = exc
                break
            self.summary.captured += 1
            return ref
        assert failure is not None
        self.summary.fail_rows(1, failure.kind, f"row {row.id}: {failure}")
        return None

    def _adopt(self, row: MissingRow, path: Path) -> HiddenStatesRef:
        return state_fill.adopt(self.store, row.id, path, token_ids=row.token_ids, layer_ids=self.layers,
                                dtype=self.settings.dtype)

    def _backoff(self, attempt: int, failure: InferenceError | None) -> float:
        opt = self.options
        if failure is not None and failure.retry_after is not None:
            return min(failure.retry_after, opt.retry_backoff_max)
        return random.uniform(0, min(opt.retry_backoff_max, opt.retry_backoff * 2 ** (attempt - 2)))

    async def _capture(self, row: MissingRow) -> HiddenStatesRef:
        server = await self.pool.acquire()
        failed = False
        body = {"request_id": f"{state_fill.request_prefix(row.id)}-{secrets.token_hex(4)}",
                "token_ids": row.token_ids, "sampling_params": {"max_tokens": 1, "temperature": 0.0}}
        try:
            self.summary.requests += 1
            try:
                resp = await self.http.post(f"{server.url}{NATIVE}", content=json.dumps(body).encode(),
                                            headers={"Content-Type": "application/json"})
            except httpx.TransportError as exc:
                failed = True
                server.last_error = describe(exc)
                kind = ("timeout" if isinstance(exc, httpx.TimeoutException)
                        else "connect" if isinstance(exc, httpx.ConnectError) else "transport")
                raise RetryableInferenceError(kind, f"{server.url}: {server.last_error}") from exc
            failed = resp.status_code >= 500 or resp.status_code in (408, 429)
            if failed:
                server.last_error = f"HTTP {resp.status_code} {resp.reason_phrase}".rstrip()
            if resp.status_code == 404:
                raise ConfigError(f"capture: {server.url} has no {NATIVE} (HTTP 404): start vLLM with "
                                  "--enable-scale-out (docs/DEPLOY.md, \"Capturing hidden states\")")
            raise_for_status(resp)
            path = _named_file(resp, server.url)
        finally:
            self.pool.release(server, failed=failed)
        local = await wait_for_file(self.store, path, self.settings.wait_seconds)
        try:
            return await asyncio.to_thread(self._adopt, row, local)
        except HiddenStatesError as exc:
            raise RetryableInferenceError("hidden_states", str(exc)) from exc


def _named_file(resp: httpx.Response, url: str) -> str:
    """The file the response names in ``kv_transfer_params.hidden_states_path``.

    Raises:
        ConfigError: it names none: the server does not capture.
        RetryableInferenceError: the body is not JSON.
    """
    try:
        payload = json.loads(resp.content)
    except ValueError as exc:
        raise RetryableInferenceError("bad_response", f"{url}: body is not JSON") from exc
    params = payload.get("kv_transfer_params") if isinstance(payload, dict) else None
    path = params.get("hidden_states_path") if isinstance(params, dict) else None
    if not isinstance(path, str) or not path:
        raise ConfigError(f"capture: {url} returned no hidden_states_path: start vLLM with eaglefeed's "
                          "capture connector (docs/DEPLOY.md, \"Capturing hidden states\")")
    return path
