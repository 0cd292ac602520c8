"""Hidden states captured in the generation pass: find each sample's file, check it, keep its reference.

A capture-enabled vLLM (``eaglefeed.plugins.vllm_hidden_states``) answers before the file is
written and names it in the response; the file appears under its final name only once complete.
The worker trusts nothing it did not check (``eaglefeed.dataset.hidden_states.check_file``): the
file's ``token_ids`` must be the row's prompt + output[:-1], its layers and dtype the run's. A file
that does not appear in time, or does not match, fails the attempt (``hidden_states``: retried,
then dead-lettered with the reason); the files of failed attempts are left for ``eaglefeed gc``.

At start-up :func:`probe_capture` sends each server one tiny request: a server started without
capture, writing to another folder than the worker's store, or capturing other layers or another
dtype than the run asks for stops the worker with one line (a configuration mistake never turns
prompts into dead letters).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from pathlib import Path, PurePath

import httpx

from eaglefeed.consumers.generate.inference.engines import ENGINES_BY_NAME, Call
from eaglefeed.consumers.generate.inference.integrity import Generation
from eaglefeed.consumers.generate.inference.servers import Server, ServerPool
from eaglefeed.core.capture import CaptureSettings
from eaglefeed.core.errors import ConfigError, InferenceError, RetryableInferenceError
from eaglefeed.dataset.hidden_states import HiddenStatesError, bytes_per_token, check_file, read_header

log = logging.getLogger(__name__)

PROBE_IDS = [0, 1, 2, 3]
"""The probe's prompt: ids every vocabulary holds."""
_FIRST_LOOK = 0.002
_LONGEST_LOOK = 0.05


class HiddenStatesCapture:
    """Attach to each generation the checked reference to its hidden-state file.

    Args:
        settings: what the run asks for.
        layers: the layers every file must hold, ascending (resolved at start-up).
    """

    def __init__(self, *, settings: CaptureSettings, layers: tuple[int, ...]) -> None:
        self.settings = settings
        self.layers = layers

    async def collect(self, gens: list[Generation], input_ids: list[int]) -> list[Generation]:
        """``gens`` with their ``hidden_states`` references, once each file is complete and matches.

        Raises:
            RetryableInferenceError: ``hidden_states`` when a file is late, missing or does not match.
        """
        return [await self._one(gen, input_ids) for gen in gens]

    async def _one(self, gen: Generation, input_ids: list[int]) -> Generation:
        if gen.capture_path is None:
            raise RetryableInferenceError("hidden_states", "the response names no hidden-state file")
        local = await wait_for_file(self.settings.store, gen.capture_path, self.settings.wait_seconds)
        try:
            ref = await asyncio.to_thread(check_file, local, token_ids=input_ids + gen.output_ids[:-1],
                                          layer_ids=self.layers, dtype=self.settings.dtype)
        except HiddenStatesError as exc:
            raise RetryableInferenceError("hidden_states", str(exc)) from exc
        return dataclasses.replace(gen, hidden_states=ref)


async def wait_for_file(store: Path, server_path: str, seconds: float) -> Path:
    """The store's copy of the file the server names, once it exists (its folder may be mounted elsewhere).

    Raises:
        RetryableInferenceError: ``hidden_states`` when it did not appear within ``seconds``.
    """
    local = Path(store) / PurePath(server_path).name
    deadline = time.monotonic() + seconds
    pause = _FIRST_LOOK
    while not local.exists():
        if time.monotonic() >= deadline:
            raise RetryableInferenceError("hidden_states", f"{local.name} did not appear in {store} within "
                                          f"{seconds:.0f} s of its response")
        await asyncio.sleep(pause)
        pause = min(pause * 2, _LONGEST_LOOK)
    return local


async def probe_capture(pool: ServerPool, http: httpx.AsyncClient,
                        settings: CaptureSettings) -> tuple[int, ...]:
    """Check every server captures what the run asks, into the worker's store; returns the layers.

    Raises:
        ConfigError: a server does not capture, writes elsewhere, or captures other layers or another dtype.
    """
    settings.store.mkdir(parents=True, exist_ok=True)
    found: tuple[int, ...] | None = None
    for server in pool.servers:
        layers = await _probe(pool, http, server, settings)
        if found is not None and layers != found:
            raise ConfigError(f"--hidden-states: {server.url} captures layers {list(layers)}, another server "
                              f"{list(found)}: every server must capture the same layers")
        found = layers
    assert found is not None
    return found


async def _probe(pool: ServerPool, http: httpx.AsyncClient, server: Server, settings: CaptureSettings
                 ) -> tuple[int, ...]:
    info = await pool.info(server)
    if info.engine != "vllm":
        raise ConfigError(f"--hidden-states: {server.url} is {info.engine}; capture in the generation pass "
                          "needs vLLM with eaglefeed's connector (docs/DEPLOY.md, \"Hidden states\")")
    call = Call(input_ids=PROBE_IDS, sampling_params={"max_new_tokens": 1, "temperature": 0.0, "n": 1},
                n=1, rid=f"eaglefeed-capture-probe-{time.time_ns()}", vocab_size=None, capture=True)
    try:
        [gen] = await ENGINES_BY_NAME["vllm"].generate(client=http, server=server, info=info, call=call,
                                                       started=time.perf_counter())
    except InferenceError as exc:
        raise ConfigError(f"--hidden-states: the capture probe of {server.url} failed: {exc}") from exc
    assert gen.capture_path is not None
    try:
        local = await wait_for_file(settings.store, gen.capture_path, settings.wait_seconds)
    except RetryableInferenceError:
        raise ConfigError(f"--hidden-states: {server.url} writes its states to "
                          f"{PurePath(gen.capture_path).parent}, and nothing reached --hidden-states-dir "
                          f"{settings.store}: the server's "
                          "shared_storage_path must be that folder") from None
    try:
        header = read_header(local)
        layers = tuple(int(x) for x in json.loads(header.metadata.get("layer_ids", "[]")))
        depth = int(header.metadata.get("num_hidden_layers", "-1"))
        dtype = header.metadata.get("dtype", "?")
        _, shape, _, _ = header.tensors["hidden_states"]
    except (HiddenStatesError, ValueError, KeyError) as exc:
        raise ConfigError(f"--hidden-states: {server.url} wrote a file eaglefeed cannot read: {exc}") from exc
    finally:
        local.unlink(missing_ok=True)
    expected = settings.expected_layers(depth)
    if layers != expected:
        raise ConfigError(f"--hidden-states: {server.url} captures layers {list(layers)} of {depth}; the run "
                          f"asks for {list(expected)}: start vLLM with eagle_aux_hidden_state_layer_ids "
                          f"{list(expected)} or pass --hidden-states {','.join(map(str, layers))}")
    if settings.dtype is not None and dtype != settings.dtype:
        raise ConfigError(f"--hidden-states: {server.url} stores {dtype}, the run asks for {settings.dtype}")
    per_token = bytes_per_token(len(layers), shape[-1], dtype)
    log.info("hidden states from %s: layers %s of %d, hidden %d, %s: %.1f KiB per token, %.1f MiB per "
             "2,048-token row", server.url, list(layers), depth, shape[-1], dtype, per_token / 1024,
             per_token * 2048 / (1 << 20))
    return layers
