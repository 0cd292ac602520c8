"""Hidden states captured in the generation pass: find each sample's file, check it, keep its reference.

A capture-enabled vLLM (``eaglefeed.plugins.vllm_hidden_states``) answers before the file is
written and names it in the response; the file appears under its final name only once complete.
The worker trusts nothing it did not check (``eaglefeed.dataset.hidden_states.check_file``): the
file's ``token_ids`` must be the row's prompt + output[:-1], its layers and dtype the run's. A file
that does not appear in time, or does not match, fails the attempt (``hidden_states``: retried,
then dead-lettered with the reason); a file that did not match is deleted at once (no row will
name it, and it would count against ``--hidden-states-budget``); one that came too late is left
for ``eaglefeed gc`` (or, in a spool, for :func:`sweep_spool`).
When the dataset lives in an object store, the checked file is uploaded (with its sha256 as the
object's metadata) before the row is published, and deleted from the local spool; or, when the
connector puts its files into the store itself (``kv_connector_extra_config.store``, found by the
probe), the worker waits for the object and checks its header and ``token_ids`` by ranged reads
(``eaglefeed.dataset.store.states``): then nothing is spooled, and the worker need not share a
filesystem with vLLM.

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
from collections.abc import Awaitable, Callable
from pathlib import Path, PurePath
from typing import TypeVar

import httpx
import numpy as np

from eaglefeed.consumers.generate.inference.engines import ENGINES_BY_NAME, Call
from eaglefeed.consumers.generate.inference.integrity import Generation
from eaglefeed.consumers.generate.inference.servers import Server, ServerInfo, ServerPool
from eaglefeed.core.capture import CaptureSettings, default_layers
from eaglefeed.core.errors import ConfigError, InferenceError, RetryableInferenceError
from eaglefeed.dataset.hidden_states import STORE, HiddenStatesError, bytes_per_token, check_file, read_header
from eaglefeed.dataset.state_files.write import write_file, write_positions
from eaglefeed.dataset.store import ObjectStore, parse
from eaglefeed.dataset.store.client import StoredObject
from eaglefeed.dataset.store.states import check_stored, read_stored_header

log = logging.getLogger(__name__)
T = TypeVar("T")

PROBE_IDS = [0, 1, 2, 3]
"""The probe's prompt: ids every vocabulary holds."""
_FIRST_LOOK = 0.002
_LONGEST_LOOK = 0.05
SWEEP_SECONDS = 300.0
"""How often a worker with a spool deletes the spool's stale files (:func:`sweep_spool`)."""
STALE_MARGIN = 600.0
_SPOOLED = (".safetensors", ".safetensors.tmp")
_FIRST_STORE_LOOK = 0.02
_LONGEST_STORE_LOOK = 0.25  # a HEAD per look and request in flight: fewer, later looks than on a disk


@dataclasses.dataclass(frozen=True)
class CaptureTarget:
    """What the probe found the servers capture.

    Attributes:
        layers: the layers every file holds, ascending.
        depth: the model's N as the servers report it (0 when none says).
        server_uploads: the servers put their files into the dataset's object store themselves.
    """

    layers: tuple[int, ...]
    depth: int
    server_uploads: bool = False


class HiddenStatesCapture:
    """Attach to each generation the checked reference to its hidden-state file.

    Args:
        settings: what the run asks for.
        layers: the layers every file must hold, ascending (resolved at start-up).
        num_hidden_layers: the model's N as the servers report it (0: unknown, SGLang), for the
            files the worker writes itself.
        server_uploads: the servers put each file into the dataset's object store themselves.
    """

    def __init__(self, *, settings: CaptureSettings, layers: tuple[int, ...],
                 num_hidden_layers: int = 0, server_uploads: bool = False) -> None:
        self.settings = settings
        self.layers = layers
        self.num_hidden_layers = num_hidden_layers
        self._store = ObjectStore(parse(settings.upload)) if settings.upload else None
        self.server_uploads = server_uploads and self._store is not None
        self.stale_after = spool_stale_after(settings)
        self._swept = time.monotonic()  # the probe swept at start-up

    async def collect(self, gens: list[Generation], input_ids: list[int], *,
                      start: int = 0) -> list[Generation]:
        """``gens`` with their ``hidden_states`` references, once each file is complete and matches.

        Args:
            gens: the checked samples of one request.
            input_ids: the prompt sent.
            start: the first position to keep: in a ``tokens`` conversation lane, the positions
                its earlier turns' files hold are not stored again (a file of the rest is kept).

        Raises:
            RetryableInferenceError: ``hidden_states`` when a file is late, missing or does not match.
        """
        if self._store is not None and time.monotonic() - self._swept >= SWEEP_SECONDS:
            self._swept = time.monotonic()
            await asyncio.to_thread(sweep_spool, self.settings.store, older_than=self.stale_after)
        return [await self._one(gen, input_ids, start) for gen in gens]

    async def _one(self, gen: Generation, input_ids: list[int], start: int) -> Generation:
        if gen.capture_path is None:
            raise RetryableInferenceError("hidden_states", "the response names no hidden-state file")
        ids = input_ids + gen.output_ids[:-1]
        if self.server_uploads and gen.states is None:
            return await self._stored(gen, ids, start)
        local: Path | None = None
        try:
            if gen.states is not None:  # SGLang sent them in the response: the worker stores them
                local = self.settings.store / gen.capture_path
                await asyncio.to_thread(self._write, local, gen.states[start:], ids[start:], start)
            else:
                local = await wait_for_file(self.settings.store, gen.capture_path, self.settings.wait_seconds)
                if start:  # checked whole first (not hashed: it is replaced), then the new positions kept
                    await asyncio.to_thread(check_file, local, token_ids=ids, layer_ids=self.layers,
                                            dtype=self.settings.dtype, digest=False)
                    local = await asyncio.to_thread(_keep_from, local, start)
            ref = await asyncio.to_thread(check_file, local, token_ids=ids[start:], layer_ids=self.layers,
                                          dtype=self.settings.dtype, start=start)
        except HiddenStatesError as exc:
            if local is not None:  # no row will name it: left, it would count against the budget until gc
                local.unlink(missing_ok=True)
            raise RetryableInferenceError("hidden_states", str(exc)) from exc
        if self._store is not None:  # the dataset's home is an object store: the checked file goes there
            await asyncio.to_thread(self._store.put_file, ref.uri, local, sha256=ref.sha256)
            local.unlink(missing_ok=True)
        return dataclasses.replace(gen, hidden_states=ref)

    async def _stored(self, gen: Generation, ids: list[int], start: int) -> Generation:
        """The reference to a file the server put into the store: waited for, checked by ranged reads.

        A lane's later turn (``start`` > 0) keeps only its new positions: the object is fetched
        into the spool, cut and uploaded as the worker's own file, and the whole one deleted.
        """
        assert self._store is not None and gen.capture_path is not None
        store, rel = self._store, f"{STORE}/{PurePath(gen.capture_path).name}"
        stored = await wait_for_object(store, rel, self.settings.wait_seconds)
        local = self.settings.store / PurePath(rel).name
        try:
            if start:
                if not await asyncio.to_thread(store.download, rel, local):
                    raise HiddenStatesError(f"{local.name}: gone from the store before it was read")
                await asyncio.to_thread(check_file, local, token_ids=ids, layer_ids=self.layers,
                                        dtype=self.settings.dtype, digest=False)
                kept = await asyncio.to_thread(_keep_from, local, start)
                ref = await asyncio.to_thread(check_file, kept, token_ids=ids[start:], layer_ids=self.layers,
                                              dtype=self.settings.dtype, start=start)
                await asyncio.to_thread(store.put_file, ref.uri, kept, sha256=ref.sha256)
                kept.unlink(missing_ok=True)
                await asyncio.to_thread(store.delete, rel)
            else:
                ref = await asyncio.to_thread(check_stored, store, stored, token_ids=ids,
                                              layer_ids=self.layers, dtype=self.settings.dtype)
        except HiddenStatesError as exc:
            await asyncio.to_thread(store.delete, rel)  # no row will name it (as a local file, above)
            for leftover in (local, _kept_name(local, start)):
                leftover.unlink(missing_ok=True)
            raise RetryableInferenceError("hidden_states", str(exc)) from exc
        return dataclasses.replace(gen, hidden_states=ref)

    def _write(self, path: Path, states: np.ndarray, token_ids: list[int], start: int) -> None:
        """Store SGLang's ``[T, L × H]`` rows as a ``[T, L, H]`` file, as the vLLM connector would."""
        layers = len(self.layers)
        if states.shape[1] % layers:
            raise RetryableInferenceError("hidden_states", f"rows of {states.shape[1]} values do not split "
                                          f"into {layers} layers")
        write_file(path, states=states.reshape(states.shape[0], layers, -1), token_ids=token_ids,
                   layer_ids=self.layers, num_hidden_layers=self.num_hidden_layers,
                   dtype=self.settings.dtype or "bfloat16", start=start)


def _keep_from(path: Path, start: int) -> Path:
    """Replace a checked whole file by its positions from ``start`` on; returns the new file.

    Every tensor's raw values are copied (nothing converted: the new file's values are the old one's).
    """
    kept = _kept_name(path, start)
    write_positions(path, kept, slice(start, None), start=start)
    path.unlink()
    return kept


def _kept_name(path: Path, start: int) -> Path:
    return path.with_name(f"{path.stem}.from{start}.safetensors")


def spool_stale_after(settings: CaptureSettings) -> float:
    """Seconds after which a spool file is waited for by no attempt: the wait, and ten minutes to spare."""
    return settings.wait_seconds + STALE_MARGIN


def sweep_spool(spool: Path, *, older_than: float) -> int:
    """Delete the spool's files older than ``older_than`` seconds; returns how many.

    In a dataset whose home is an object store the spool is outside the dataset, so ``eaglefeed
    gc`` never sees it: files of attempts that came too late, ``.tmp`` files of a server killed
    while writing, a lane's cut of a worker killed before its upload would stay on the GPU host's
    disk for good. None of them is ever read again once no attempt waits for it. Only hidden-state
    files are touched (``*.safetensors``, ``*.safetensors.tmp``), whatever else the folder holds.
    """
    cutoff = time.time() - older_than
    swept = 0
    for path in spool.iterdir() if spool.is_dir() else ():
        try:
            if path.name.endswith(_SPOOLED) and path.is_file() and path.stat().st_mtime < cutoff:
                path.unlink()
                swept += 1
        except FileNotFoundError:
            continue  # taken by its attempt meanwhile
    if swept:
        log.info("hidden states: deleted %d files older than %.0f s from the spool %s (attempts that failed, "
                 "came too late or were killed)", swept, older_than, spool)
    return swept


async def wait_for_file(store: Path, server_path: str, seconds: float) -> Path:
    """The store's copy of the file the server names, once it exists (its folder may be mounted elsewhere).

    Raises:
        RetryableInferenceError: ``hidden_states`` when it did not appear within ``seconds``.
    """
    local = Path(store) / PurePath(server_path).name

    async def look() -> Path | None:
        return local if local.exists() else None

    return await _wait(look, seconds, _FIRST_LOOK, _LONGEST_LOOK, f"{local.name} did not appear in {store}")


async def wait_for_object(store: ObjectStore, rel: str, seconds: float) -> StoredObject:
    """The store's object ``rel`` (a file the server puts there), once it exists.

    Raises:
        RetryableInferenceError: ``hidden_states`` when it did not appear within ``seconds``.
    """
    return await _wait(lambda: asyncio.to_thread(store.head, rel), seconds, _FIRST_STORE_LOOK,
                       _LONGEST_STORE_LOOK, f"{rel} did not appear in {store.uri}")


async def _wait(look: Callable[[], Awaitable[T | None]], seconds: float, first: float, longest: float,
                late: str) -> T:
    """What ``look`` finds, looking again after pauses growing from ``first`` to ``longest``."""
    deadline = time.monotonic() + seconds
    pause = first
    while (found := await look()) is None:
        if time.monotonic() >= deadline:
            raise RetryableInferenceError("hidden_states", f"{late} within {seconds:.0f} s of its response")
        await asyncio.sleep(pause)
        pause = min(pause * 2, longest)
    return found


async def probe_capture(pool: ServerPool, http: httpx.AsyncClient,
                        settings: CaptureSettings) -> tuple[int, ...]:
    """Check every server captures what the run asks, into the worker's store; returns the layers.

    Raises:
        ConfigError: a server does not capture, writes elsewhere, or captures other layers or another dtype.
    """
    return (await probe_capture_target(pool, http, settings)).layers


async def probe_capture_target(pool: ServerPool, http: httpx.AsyncClient,
                               settings: CaptureSettings) -> CaptureTarget:
    """:func:`probe_capture`, the model's N as the servers report it, and who puts the files in the store.

    Raises:
        ConfigError: a server does not capture, writes elsewhere, or captures other layers or another dtype.
    """
    settings.store.mkdir(parents=True, exist_ok=True)
    store = ObjectStore(parse(settings.upload)) if settings.upload else None
    if store is not None:  # a store that cannot be reached or refuses us is found now, in one line
        await asyncio.to_thread(store.ensure_bucket)
        await asyncio.to_thread(sweep_spool, settings.store, older_than=spool_stale_after(settings))
    found: CaptureTarget | None = None
    for server in pool.servers:
        info = await pool.info(server)
        target = (await _probe_sglang(pool, http, server, settings) if info.engine == "sglang"
                  else await _probe(pool, http, server, settings, store))
        if found is not None and target.layers != found.layers:
            raise ConfigError(f"--hidden-states: {server.url} captures layers {list(target.layers)}, another "
                              f"server {list(found.layers)}: every server must capture the same layers")
        if found is not None and target.server_uploads != found.server_uploads:
            uploader = server.url if target.server_uploads else "another server"
            raise ConfigError(f"--hidden-states: {uploader} puts its files into the store itself and "
                              f"{'another server' if target.server_uploads else server.url} does not: start "
                              "every vLLM with the same kv_connector_extra_config.store")
        found = target if found is None or not found.depth else found
    assert found is not None
    return found


async def _probe(pool: ServerPool, http: httpx.AsyncClient, server: Server, settings: CaptureSettings,
                 store: ObjectStore | None) -> CaptureTarget:
    info = await pool.info(server)
    gen = await _probe_request(http, server, info, max_new_tokens=1)
    assert gen.capture_path is not None
    name = PurePath(gen.capture_path).name
    local, rel = settings.store / name, f"{STORE}/{name}"

    async def look() -> Path | StoredObject | None:  # the spool first; the store if the server puts there
        if local.exists():
            return local
        return None if store is None else await asyncio.to_thread(store.head, rel)

    try:
        found = await _wait(look, settings.wait_seconds, _FIRST_LOOK,
                            _LONGEST_LOOK if store is None else _LONGEST_STORE_LOOK, name)
    except RetryableInferenceError:
        where = f"--hidden-states-dir {settings.store}" + (f" nor {store.uri}/{STORE}" if store else "")
        either = ", or its kv_connector_extra_config.store that store" if store else ""
        raise ConfigError(f"--hidden-states: {server.url} writes its states to "
                          f"{PurePath(gen.capture_path).parent}, and nothing reached {where}: the server's "
                          f"shared_storage_path must be that folder{either}") from None
    uploads = isinstance(found, StoredObject)
    try:
        if uploads:
            assert store is not None
            header, _first = await asyncio.to_thread(read_stored_header, store, rel)
        else:
            header = read_header(local)
        layers = tuple(int(x) for x in json.loads(header.metadata.get("layer_ids", "[]")))
        depth = int(header.metadata.get("num_hidden_layers", "-1"))
        dtype = header.metadata.get("dtype", "?")
        _, shape, _, _ = header.tensors["hidden_states"]
    except (HiddenStatesError, ValueError, KeyError) as exc:
        raise ConfigError(f"--hidden-states: {server.url} wrote a file eaglefeed cannot read: {exc}") from exc
    finally:
        if uploads:
            assert store is not None
            await asyncio.to_thread(store.delete, rel)
        else:
            local.unlink(missing_ok=True)
    expected = settings.expected_layers(depth)
    if layers != expected:
        raise ConfigError(f"--hidden-states: {server.url} captures layers {list(layers)} of {depth}; the run "
                          f"asks for {list(expected)}: start vLLM with eagle_aux_hidden_state_layer_ids "
                          f"{list(expected)} or pass --hidden-states {','.join(map(str, layers))}")
    if settings.dtype is not None and dtype != settings.dtype:
        raise ConfigError(f"--hidden-states: {server.url} stores {dtype}, the run asks for {settings.dtype}")
    _log_size(server, layers, depth, shape[-1], dtype)
    if uploads:
        log.info("hidden states from %s: the server puts each file into %s/%s itself; the worker checks "
                 "each object by ranged reads", server.url, settings.upload, STORE)
    return CaptureTarget(layers, depth, server_uploads=uploads)


async def _probe_sglang(pool: ServerPool, http: httpx.AsyncClient, server: Server,
                        settings: CaptureSettings) -> CaptureTarget:
    """SGLang returns the aux layers in the response; check it is started so that they are whole."""
    info = await pool.info(server)
    args = info.capture_args
    if args.get("enable_return_aux_hidden_states") is not True:
        raise ConfigError(f"--hidden-states: {server.url} is SGLang without aux hidden states: start it "
                          "with --enable-return-aux-hidden-states --speculative-algorithm EAGLE3 "
                          "(docs/DEPLOY.md)")
    if args.get("disable_radix_cache") is not True or args.get("chunked_prefill_size") not in (-1, None):
        raise ConfigError(f"--hidden-states: {server.url} is SGLang with its prefix cache or chunked prefill "
                          "on, whose skipped positions get no states: start it with --disable-radix-cache "
                          "--chunked-prefill-size -1")
    if settings.with_last:
        raise ConfigError("--hidden-states auto+last: SGLang returns no state of the last layer (its ids "
                          "must be below N); use vLLM, or the aux layers alone")
    layers, depth = _sglang_layers(server, args.get("return_aux_hidden_state_layer_ids"), settings)
    dtype = settings.dtype or "bfloat16"
    gen = await _probe_request(http, server, info, max_new_tokens=2)
    width = gen.states.shape[1]
    if width % len(layers):
        raise ConfigError(f"--hidden-states: {server.url} returns rows of {width} values, which do not "
                          f"split into the {len(layers)} layers {list(layers)}: check the layer ids")
    _log_size(server, layers, depth, width // len(layers), dtype)
    return CaptureTarget(layers, depth)


async def _probe_request(http: httpx.AsyncClient, server: Server, info: ServerInfo, *,
                         max_new_tokens: int) -> Generation:
    """One tiny greedy capturing request to ``server`` (its engine's way); a failure stops the worker."""
    call = Call(input_ids=PROBE_IDS, sampling_params={"max_new_tokens": max_new_tokens, "temperature": 0.0,
                                                      "n": 1},
                n=1, rid=f"eaglefeed-capture-probe-{time.time_ns()}", vocab_size=None, capture=True)
    try:
        [gen] = await ENGINES_BY_NAME[info.engine].generate(client=http, server=server, info=info, call=call,
                                                            started=time.perf_counter())
    except InferenceError as exc:
        raise ConfigError(f"--hidden-states: the capture probe of {server.url} failed: {exc}") from exc
    return gen


def _sglang_layers(server: Server, explicit: object,
                   settings: CaptureSettings) -> tuple[tuple[int, ...], int]:
    """The layers an SGLang server captures, as vLLM ids, and N when it can be told (else 0).

    An explicit SGLang id j is layer j's output, vLLM id j + 1; without explicit ids SGLang takes
    ``[2, N//2, N-3]`` (layer inputs, the same as vLLM's ids), and reports no N: the run's ids
    must then be that default for some N.
    """
    if isinstance(explicit, list) and explicit:
        layers = tuple(sorted(int(j) + 1 for j in explicit))
        if settings.layers is not None and layers != tuple(sorted(settings.layers)):
            raise ConfigError(f"--hidden-states: {server.url} captures layers {list(layers)} (SGLang ids "
                              f"{sorted(explicit)} + 1); the run asks for {sorted(settings.layers)}")
        return layers, 0
    if settings.layers is None:
        raise ConfigError(f"--hidden-states auto: {server.url} uses SGLang's default layers and does not "
                          "report its model's depth: give the layer ids, e.g. --hidden-states 2,16,29 for 32 "
                          "layers")
    wanted = tuple(sorted(settings.layers))
    depth = next((n for n in range(4, 1025) if default_layers(n) == wanted), 0)
    if not depth:
        raise ConfigError(f"--hidden-states: {server.url} uses SGLang's default layers [2, N//2, N-3], and "
                          f"{list(wanted)} is that for no N: start SGLang with "
                          "--return-aux-hidden-state-layer-ids")
    return wanted, depth


def _log_size(server: Server, layers: tuple[int, ...], depth: int, hidden: int, dtype: str) -> None:
    per_token = bytes_per_token(len(layers), hidden, dtype)
    log.info("hidden states from %s: layers %s of %s, hidden %d, %s: %.1f KiB per token, %.1f MiB per "
             "2,048-token row", server.url, list(layers), depth or "?", hidden, dtype, per_token / 1024,
             per_token * 2048 / (1 << 20))
