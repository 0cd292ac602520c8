"""A vLLM KV connector writing the target's hidden states per request, on GPU and on CPU.

This module stands alone: it imports only the standard library, torch, safetensors and vLLM (and
boto3 with the ``store`` option), so it can be copied as a single file onto the vLLM host (module
path ``vllm_hidden_states``) or imported from an installed eaglefeed
(``eaglefeed.plugins.vllm_hidden_states``). See :class:`EaglefeedHiddenStatesConnector`.
"""

# mypy: disable-error-code="import-not-found,import-untyped,misc,override,no-any-return"
# (torch and vLLM are not installed where eaglefeed is type-checked; this file runs inside vLLM.)

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
from functools import partial
from typing import Any

import torch
from safetensors.torch import save, save_file
from vllm.distributed.kv_transfer.kv_connector.v1.example_hidden_states_connector import (
    ExampleHiddenStatesConnector,
    PendingSave,
)
from vllm.logger import init_logger

logger = init_logger(f"vllm.{__name__}")  # under vLLM's logger, so its handlers print our lines

FORMAT = "eaglefeed-hidden-states/1"
LAST_LAYER = "before_final_norm"
STORE_DTYPES: dict[str, torch.dtype | None] = {
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float8_e4m3fn": torch.float8_e4m3fn,  # scaled: one float32 scale per position and layer
    "model": None,  # whatever the engine computes (and caches) in
}
SCALES = "hidden_states_scales"  # speculators' name for an fp8 file's scales; its reader broadcasts them
E4M3_MAX = 448.0  # torch.finfo(torch.float8_e4m3fn).max
TMP_SUFFIX = ".tmp"
# safetensors creates files as 0600; give ours the mode any new file gets here (readers may run as
# another user on shared storage). The umask is read once, at import, before any writer thread.
_UMASK = os.umask(0o022)
os.umask(_UMASK)
FILE_MODE = 0o666 & ~_UMASK


class _CopyDone:
    """Stands in for the stock connector's CUDA event once the rows are already on the host."""

    def query(self) -> bool:
        """Report the copy as complete (it was synchronous).

        Returns:
            Always True.
        """
        return True

    def synchronize(self) -> None:
        """Return at once: nothing is in flight."""


_COPY_DONE = _CopyDone()


class StoreWriter:
    """Puts files into ``s3://bucket/prefix`` (the dataset's ``hidden_states/``) with boto3.

    The endpoint and credentials come from boto3's own chain in vLLM's environment
    (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``, ...),
    as for eaglefeed's own commands. Each object carries its sha256 as metadata and its MD5 as
    ``Content-MD5``, so the store refuses a body damaged on the way; boto3's standard retries
    cover passing failures. Request checksums are sent only when required: several
    S3-compatible servers refuse the newer SDK default.

    Args:
        uri: ``s3://bucket/prefix/hidden_states``.

    Raises:
        ValueError: ``uri`` is not such a URI, or boto3 is not installed.
    """

    def __init__(self, uri: str) -> None:
        bucket, _, prefix = uri.removeprefix("s3://").strip("/").partition("/")
        if not uri.startswith("s3://") or not bucket or prefix.rpartition("/")[2] != "hidden_states":
            raise ValueError(f"kv_connector_extra_config.store must name the dataset's hidden_states/ "
                             f"folder, s3://bucket/prefix/hidden_states, not {uri!r}")
        try:
            import boto3
            from botocore.config import Config
        except ImportError:
            raise ValueError("kv_connector_extra_config.store needs boto3 in vLLM's environment "
                             "(pip install boto3)") from None
        config = Config(request_checksum_calculation="when_required",
                        response_checksum_validation="when_required",
                        retries={"max_attempts": 5, "mode": "standard"}, connect_timeout=10, read_timeout=120)
        self.uri, self.bucket, self.prefix = uri.rstrip("/"), bucket, prefix
        self._client = boto3.session.Session().client("s3", config=config)

    def check(self) -> None:
        """Log one line if the bucket cannot be reached now (the worker's probe creates a missing one)."""
        try:
            self._client.head_bucket(Bucket=self.bucket)
        except Exception as exc:  # noqa: BLE001 - any failure: said once, each file's put says it again
            code = str(getattr(exc, "response", {}).get("Error", {}).get("Code", ""))
            if code in ("404", "NoSuchBucket", "NotFound"):
                logger.info("eaglefeed hidden states: bucket %s does not exist yet (the worker's start "
                            "creates it)", self.bucket)
                return
            logger.warning("eaglefeed hidden states: %s cannot be reached yet (%s: %s); each file's put "
                           "fails until it can (endpoint and credentials: AWS_* in vLLM's environment)",
                           self.uri, type(exc).__name__, exc)

    def put(self, name: str, data: bytes) -> None:
        """Put ``data`` as ``<prefix>/<name>`` (a put is atomic: a reader sees all of it or nothing)."""
        md5 = base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode()
        self._client.put_object(Bucket=self.bucket, Key=f"{self.prefix}/{name}", Body=data,
                                Metadata={"sha256": hashlib.sha256(data).hexdigest()}, ContentMD5=md5)


_STATES_ONLY_MARK = "_eaglefeed_states_only"


def _states_only(propose: Any) -> Any:
    """Wrap ``ExtractHiddenStatesProposer.propose``: cache the states, propose no draft token.

    The stock proposer runs its cache-only forward (which writes every scheduled position's
    hidden states into the hidden-states cache), then returns the token just sampled as a
    one-token "draft". That draft is not free: the scheduler schedules it as a verify token in the
    next step, so every decode step puts 2 tokens per request through the target model and the
    rejection sampler, and the draft is accepted only when the model repeats its last token. With
    no draft (a ``[batch, 0]`` tensor) the scheduler schedules one token per decoding request,
    the step is an ordinary (non-speculative) decode, and the extractor still caches that token's
    states: same positions, same values, same greedy output.
    """

    def propose_states_only(self: Any, *args: Any, **kwargs: Any) -> Any:
        drafts = propose(self, *args, **kwargs)
        return drafts[:, :0]

    setattr(propose_states_only, _STATES_ONLY_MARK, True)
    propose_states_only.__wrapped__ = propose  # type: ignore[attr-defined]
    propose_states_only.__doc__ = _states_only.__doc__
    return propose_states_only


def install_states_only_proposer() -> bool:
    """Make vLLM's ``extract_hidden_states`` proposer return no draft tokens (idempotent).

    A runtime patch of the class in this process (the files on disk are untouched); it applies
    to proposers already built, as the model runner builds its drafter before the connector.
    Only the V1 model runner's ``ExtractHiddenStatesProposer`` is patched.

    Returns:
        True if installed now or before, False if this vLLM has no such proposer.
    """
    try:
        from vllm.v1.spec_decode.extract_hidden_states import ExtractHiddenStatesProposer
    except ImportError:
        return False
    if getattr(ExtractHiddenStatesProposer.propose, _STATES_ONLY_MARK, False):
        return True
    ExtractHiddenStatesProposer.propose = _states_only(ExtractHiddenStatesProposer.propose)
    return True


def dtype_name(dtype: torch.dtype) -> str:
    """Return a torch dtype's short name.

    Args:
        dtype: For example ``torch.bfloat16``.

    Returns:
        For example ``"bfloat16"``.
    """
    return str(dtype).removeprefix("torch.")


def quantize_e4m3(hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """FP8 e4m3 codes of ``[T, L, H]`` states with one scale per position and layer.

    ``scale = max |x| over H / 448`` (1 for a row of zeros), ``codes = (x / scale)`` rounded
    to e4m3 (nearest even), in float32: ``x ≈ codes × scale``, about 2⁻⁴ relative at worst.
    eaglefeed's numpy reader (``eaglefeed.dataset.state_files.e4m3``) quantizes the same way, bit for bit.

    Args:
        hidden: The states, any float dtype.

    Returns:
        ``(codes [T, L, H] float8_e4m3fn, scales [T, L, 1] float32)``, contiguous.
    """
    x = hidden.float()
    # One scale per layer, not per token: the layers' magnitudes differ by orders (embeddings vs N).
    scales = x.abs().amax(dim=-1, keepdim=True) / E4M3_MAX
    scales = torch.where(scales > 0, scales, torch.ones_like(scales))  # a row of zeros: codes 0
    return (x / scales).to(torch.float8_e4m3fn).contiguous(), scales.contiguous()


def write_atomically(tensors: dict[str, torch.Tensor], path: str, metadata: dict[str, str]) -> None:
    """Write a safetensors file so that ``path`` exists only once it is complete and durable.

    The file is written as ``path + ".tmp"``, fsynced, renamed to ``path``, then the directory is
    fsynced. On any failure the temporary file is removed and the error re-raised.

    Args:
        tensors: Contiguous CPU tensors by name.
        path: The final file name.
        metadata: The safetensors header metadata (str to str).
    """
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    tmp = path + TMP_SUFFIX
    try:
        save_file(tensors, tmp, metadata=metadata)
        os.chmod(tmp, FILE_MODE)
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # some filesystems refuse to fsync a directory
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


class EaglefeedHiddenStatesConnector(ExampleHiddenStatesConnector):
    r"""Write each request's hidden states at the configured layers to one safetensors file.

    What it does: with vLLM's ``extract_hidden_states`` speculative method, the target model's
    residual stream at the configured layers is cached per token next to the KV cache. When a
    request finishes, this connector gathers its rows and writes them, from a thread pool, to
    ``<shared_storage_path>/<internal request id>.safetensors``; the response's top-level
    ``kv_transfer_params.hidden_states_path`` names that file. It is vLLM's
    ``ExampleHiddenStatesConnector`` with three changes: it also runs where the KV cache is not
    on CUDA (the rows are gathered on the host synchronously, then written by the pool), every
    file is written atomically with the metadata below, and no ``.lock`` files are made
    (``use_synchronization_lock`` is forced off: the final name is the completion marker).

    Launch (GPU; on CPU also set ``VLLM_CPU_NUM_OF_RESERVED_CPU=1`` on small hosts)::

        python -m vllm.entrypoints.openai.api_server --model MODEL --enable-scale-out \
          --speculative-config '{"method": "extract_hidden_states", "num_speculative_tokens": 1,
            "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [2, 16, 29, 32]}}}' \
          --kv-transfer-config '{"kv_connector": "EaglefeedHiddenStatesConnector",
            "kv_role": "kv_producer", "kv_connector_module_path": "vllm_hidden_states",
            "kv_connector_extra_config": {"shared_storage_path": "/data/hs", "dtype": "bfloat16"}}'

    With ``"store": "s3://bucket/prefix/hidden_states"`` in the extra config (the dataset's
    folder in an object store; boto3 in vLLM's environment, the endpoint and credentials from
    the usual ``AWS_*`` names), each file is serialized in memory and put there
    (:class:`StoreWriter`) under the name it would have had in ``shared_storage_path``, which
    then holds nothing: the GPU host keeps no file and shares no filesystem with the worker.

    (module path ``eaglefeed.plugins.vllm_hidden_states`` when eaglefeed is installed in vLLM's
    environment). ``dtype`` is ``bfloat16`` (default), ``float32`` or ``model`` (the engine's
    own dtype) or ``float8_e4m3fn`` (e4m3 with a float32 scale per position and layer: about half
    of bf16's bytes). Requests send ``"kv_transfer_params": {"include_output_tokens": true}`` so that
    the file covers prompt + output[:-1], from the same pass that generated the output.

    Decode steps: vLLM's ``extract_hidden_states`` proposer would draft one token per request
    each step (a verify token through the whole model); this connector wraps it to draft none
    (:func:`install_states_only_proposer`), where that is safe: V1 model runner, synchronous
    scheduling (always so on CPU). ``"draft_tokens": true`` in the extra config keeps the draft.

    File contract:

    * The file is written as ``<path>.tmp``, flushed and fsynced, then renamed to ``<path>``:
      ``<path>`` exists only when complete. The response may arrive before the file does.
    * ``hidden_states``: ``[T, L, H]`` in the stored dtype, the layer axis in ascending layer-id
      order (vLLM collects the layers sorted, whatever order was configured).
    * ``token_ids``: ``[T]`` int64, the tokens the rows belong to (prompt + output[:-1]).
    * With ``float8_e4m3fn``: ``hidden_states_scales`` ``[T, L, 1]`` float32, the states being
      ``hidden_states × hidden_states_scales`` (:func:`quantize_e4m3`; speculators' FP8 names).
    * Metadata: ``format`` = ``eaglefeed-hidden-states/1``; ``layer_ids`` = JSON list of the
      layer ids, ascending (0 = embeddings, k = the residual stream entering decoder layer k,
      N = the last layer's output before the final norm); ``num_hidden_layers`` = N;
      ``last_layer`` = ``before_final_norm``; ``dtype`` = the stored dtype's name.

    A failed write is logged (no file appears); it never stops the engine, and the request's
    blocks are released either way. A ``.tmp`` file can remain only if the process dies while
    writing it; readers ignore ``.tmp`` names.
    """

    def __init__(self, vllm_config: Any, role: Any, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        # The final name is the completion marker: no lock files, whatever the config says.
        self.use_lock = False
        requested = str(self._kv_transfer_config.get_from_extra_config("dtype", "bfloat16"))
        if requested not in STORE_DTYPES:
            raise ValueError(f"kv_connector_extra_config.dtype must be one of {sorted(STORE_DTYPES)}, "
                             f"not {requested!r}")
        self._store_dtype = STORE_DTYPES[requested]
        hf_config = self._vllm_config.speculative_config.draft_model_config.hf_config
        configured = [int(i) for i in getattr(hf_config, "eagle_aux_hidden_state_layer_ids", None) or []]
        if len(set(configured)) != len(configured):
            # vLLM collects each layer once (sorted, deduplicated) but sizes its buffer by the
            # list's length: a repeated id would give files of the wrong shape, or no engine.
            raise ValueError(f"eagle_aux_hidden_state_layer_ids repeats a layer: {configured}")
        self._num_hidden_layers = int(self._vllm_config.model_config.get_total_num_hidden_layers())
        outside = [i for i in configured if not 0 <= i <= self._num_hidden_layers]
        if outside:
            raise ValueError(f"layer ids {outside} are outside 0..{self._num_hidden_layers}")
        self._layer_ids = sorted(configured)
        store = self._kv_transfer_config.get_from_extra_config("store", None)
        self._store = StoreWriter(str(store)) if store else None
        where = self._store.uri if self._store else self._storage_path
        logger.info("eaglefeed hidden states: layers %s of %d, stored as %s, in %s", self._layer_ids,
                    self._num_hidden_layers, requested, where)
        self.draft_tokens = self._decode_with_draft_tokens()

    def _decode_with_draft_tokens(self) -> bool:
        """Install the states-only proposer unless configured off or unsafe here; log the outcome.

        Returns:
            True if decode steps keep vLLM's one draft token per request.
        """
        if self._kv_transfer_config.get_from_extra_config("draft_tokens", False):
            reason = "kv_connector_extra_config.draft_tokens is true"
        elif self._vllm_config.scheduler_config.async_scheduling:
            # The async scheduler schedules a placeholder draft per decoding request whatever the
            # proposer returns (AsyncScheduler._update_after_schedule): the patch would not help.
            reason = "async scheduling is on (--no-async-scheduling turns it off)"
        elif self._vllm_config.use_v2_model_runner:
            reason = "model runner V2 has its own extractor (VLLM_USE_V2_MODEL_RUNNER=0 avoids it)"
        elif not install_states_only_proposer():
            reason = "this vLLM has no ExtractHiddenStatesProposer"
        else:
            logger.info("eaglefeed hidden states: decode steps without draft tokens")
            return False
        logger.info("eaglefeed hidden states: decode steps keep vLLM's draft token: %s", reason)
        return True

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        """Find the hidden-states cache (the stock method), log where it lives, check the store if any.

        Args:
            kv_caches: The engine's caches by layer name.
        """
        super().register_kv_caches(kv_caches)
        if self._store is not None and self._is_tp_rank_zero:  # the writer's side, once distributed is up
            self._store.check()
        if self._kv_cache is not None:
            logger.info("eaglefeed hidden states: cache %s %s on %s", tuple(self._kv_cache.shape),
                        dtype_name(self._kv_cache.dtype), self._kv_cache.device)

    def _metadata(self, stored: torch.dtype) -> dict[str, str]:
        return {
            "format": FORMAT,
            "layer_ids": json.dumps(self._layer_ids),
            "num_hidden_layers": str(self._num_hidden_layers),
            "last_layer": LAST_LAYER,
            "dtype": dtype_name(stored),
        }

    def _gather_on_host(self, pending: PendingSave) -> torch.Tensor:
        """Copy a finished request's rows out of a host-resident cache: ``[T, L, H]``, contiguous.

        The cache is ``[num_blocks, L, block_size, H]``; row t of the request sits in block
        ``block_ids[t // block_size]`` at offset ``t % block_size``.
        """
        assert self._kv_cache is not None
        num_tokens = int(pending.token_ids.shape[0])
        needed = -(-num_tokens // self._block_size)
        if needed > len(pending.block_ids):
            raise ValueError(f"request {pending.req_id} has {num_tokens} tokens but only "
                             f"{len(pending.block_ids)} blocks of {self._block_size}")
        block_ids = torch.tensor(pending.block_ids[:needed], dtype=torch.long)
        blocks = self._kv_cache.index_select(0, block_ids)  # a copy: [n, L, block_size, H]
        rows = blocks.transpose(1, 2).reshape(-1, blocks.shape[1], blocks.shape[3])
        return rows[:num_tokens].to("cpu").contiguous()  # no-op on CPU; a synchronous copy elsewhere

    def _submit_async_write(self, pending: PendingSave) -> None:
        """Gather a finished request's rows and hand their write to the thread pool.

        On CUDA this is the stock method (copy stream, event, pinned memory); its writer is
        :meth:`_write_tensors` below. Elsewhere the rows are copied on the host at once and a
        completed marker is registered, so ``get_finished`` reports the request in the same step
        and its blocks are freed. Whatever fails, the request is still reported finished.
        """
        if not self._is_tp_rank_zero:
            return
        try:
            if self._kv_cache is not None and self._kv_cache.is_cuda:
                super()._submit_async_write(pending)
                return
            tensors = {"hidden_states": self._gather_on_host(pending),
                       "token_ids": pending.token_ids.to(torch.int64).clone()}
            assert pending.req_id not in self._req_futures, f"second write for request {pending.req_id}"
            future = self._executor.submit(self._write_tensors, tensors, _COPY_DONE, pending.filename, None)
            self._req_futures[pending.req_id] = future
            future.add_done_callback(partial(self._on_write_done, pending.req_id))
        except Exception:
            logger.exception("eaglefeed hidden states: no file for request %s (%s)", pending.req_id,
                             pending.filename)
        finally:
            # get_finished reports a request done only if it finds a marker for it; without one
            # its blocks would never be freed.
            self._req_copy_events.setdefault(pending.req_id, _COPY_DONE)

    def _write_tensors(self, tensors: dict[str, torch.Tensor], event: Any, filename: str,
                       lock_fd: int | None) -> None:
        """Thread-pool worker: wait for the copy, convert, write atomically; log any failure.

        Args:
            tensors: ``hidden_states`` ``[T, L, H]`` and ``token_ids`` ``[T]`` on the host.
            event: Has ``synchronize()``: the CUDA event of the device-to-host copy, or a marker.
            filename: The final file name.
            lock_fd: A stock lock file's descriptor to close (None: locks are off).
        """
        try:
            event.synchronize()
            hidden = tensors["hidden_states"]
            stored = self._store_dtype or hidden.dtype
            token_ids = tensors["token_ids"].to(torch.int64).contiguous()
            expected = (int(token_ids.shape[0]), len(self._layer_ids))
            if hidden.dim() != 3 or tuple(hidden.shape[:2]) != expected:
                raise ValueError(f"hidden states of shape {tuple(hidden.shape)} do not match "
                                 f"{expected[0]} tokens x {expected[1]} layers")
            if stored == torch.float8_e4m3fn:
                codes, scales = quantize_e4m3(hidden)
                out = {"hidden_states": codes, SCALES: scales, "token_ids": token_ids}
            else:
                out = {"hidden_states": hidden.to(stored).contiguous(), "token_ids": token_ids}
            if self._store is not None:  # no file on this host: the store's put is the completion
                self._store.put(os.path.basename(filename), save(out, metadata=self._metadata(stored)))
            else:
                write_atomically(out, filename, self._metadata(stored))
        except Exception:
            logger.exception("eaglefeed hidden states: writing %s failed", filename)
        finally:
            if lock_fd is not None:
                os.close(lock_fd)
