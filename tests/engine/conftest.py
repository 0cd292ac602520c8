"""Fixtures for tests against a real vLLM (CPU) server run from .venv-engine on a tiny local model.

These tests run only when asked: ``pytest -m engine`` (``make test-engine``) or naming
``tests/engine`` on the command line. Any other run (plain ``pytest``, ``make test``) deselects
them at collection, so it never starts vLLM; without ``.venv-engine`` they are skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import cache_dir, free_port

REPO = Path(__file__).resolve().parents[2]
ENGINE_VENV = Path(os.environ.get("EAGLEFEED_ENGINE_VENV", REPO / ".venv-engine"))
ENGINE_PYTHON = ENGINE_VENV / "bin" / "python"
SCRIPTS = REPO / "scripts" / "engine"
TOKENIZER_DIR = REPO / "eaglefeed" / "devtools" / "demo" / "tokenizer"
HERE = Path(__file__).resolve().parent
SERVED_MODEL = "tiny-llama"
MAX_MODEL_LEN = 2048
START_TIMEOUT_S = float(os.environ.get("EAGLEFEED_VLLM_START_TIMEOUT", "600"))
Reference = Callable[[Sequence[dict[str, Any]]], dict[Any, list[int]]]
# vLLM CPU 0.32.0's engine core dies when a seeded request's prefill is chunked (it rewinds the
# request's generator, which CPU generators refuse: "CPU Generator does not use offset"); a step
# budget above all concurrent prompts together keeps prefills whole.
STEP_TOKENS = "131072"
# The native token route /inference/v1/generate exists only with one of these two flags.
DEFAULT_FLAGS = ("--enable-scale-out",)
# Hidden-states capture: decoder layers of its model, and the connector's folder (one stand-alone
# file, imported by vLLM as module ``vllm_hidden_states``).
CAPTURE_LAYERS_N = 4
PLUGINS_DIR = REPO / "eaglefeed" / "plugins"


def _asked_for(config: pytest.Config) -> bool:
    if "engine" in (config.option.markexpr or ""):
        return True
    return any(Path(arg.split("::")[0]).resolve().is_relative_to(HERE) for arg in config.args)


@pytest.hookimpl(tryfirst=True)  # before -m selection, which needs the engine marker in place
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mine = [item for item in items if item.path.is_relative_to(HERE)]
    for item in mine:
        item.add_marker(pytest.mark.engine)
        if not ENGINE_PYTHON.exists():
            item.add_marker(pytest.mark.skip(reason=f"{ENGINE_VENV} is absent: `make engine-env` builds it"))
    if mine and not _asked_for(config):
        config.hook.pytest_deselected(items=mine)
        items[:] = [item for item in items if not item.path.is_relative_to(HERE)]


def _model_key() -> str:
    digest = hashlib.sha256((SCRIPTS / "build_tiny_model.py").read_bytes())
    for path in sorted(TOKENIZER_DIR.iterdir()):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def _build_model(name: str, *args: str) -> Path:
    """Build a tiny Llama once into the cache under ``name-<key>`` (args go to the build script)."""
    target = cache_dir() / "engine-models" / f"{name}-{_model_key()}"
    if not (target / "model.safetensors").exists():
        staging = target.with_name(f"{target.name}.tmp{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        cmd = [str(ENGINE_PYTHON), str(SCRIPTS / "build_tiny_model.py"), str(staging), *args]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, f"building the tiny model failed:\n{result.stderr[-4000:]}"
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    return target


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """The tiny Llama beside the demo tokenizer, built once into the cache (keyed by its inputs)."""
    return _build_model("tiny-llama")


@pytest.fixture(scope="session")
def tiny_model_4_dir() -> Path:
    """The same tiny Llama with 4 decoder layers (same seed), for hidden-states capture tests."""
    return _build_model(f"tiny-llama-{CAPTURE_LAYERS_N}l", "--layers", str(CAPTURE_LAYERS_N))


@dataclass
class VllmServer:
    """One vLLM OpenAI-compatible API server process (API server, engine core and worker)."""

    model_dir: Path
    port: int
    log_dir: Path
    flags: tuple[str, ...] = DEFAULT_FLAGS
    extra_env: dict[str, str] = field(default_factory=dict)  # applied last (PYTHONPATH included)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    start_seconds: list[float] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"vllm-{self.port}-{self.starts}.log"

    def log_tail(self, lines: int = 60) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def start(self, flags: Sequence[str] | None = None) -> VllmServer:
        """Start on self.port (with new extra flags if given) and wait for /health."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        if flags is not None:
            self.flags = tuple(flags)
        self.starts += 1
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update(VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1",
                   TRANSFORMERS_OFFLINE="1")
        env.update(self.extra_env)
        cmd = [str(ENGINE_PYTHON), "-m", "vllm.entrypoints.openai.api_server",
               "--model", str(self.model_dir), "--served-model-name", SERVED_MODEL,
               "--host", "127.0.0.1", "--port", str(self.port), "--max-model-len", str(MAX_MODEL_LEN),
               "--enforce-eager", "--dtype", "float32", "--max-num-batched-tokens", STEP_TOKENS, *self.flags]
        with self.log_path.open("wb") as log:
            # A session of its own: kill() can take the engine core and worker down with it.
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         cwd=self.log_dir, start_new_session=True)
        began = time.monotonic()
        while time.monotonic() - began < START_TIMEOUT_S:
            if self.proc.poll() is not None:
                pytest.fail(f"vLLM exited with {self.proc.returncode} while starting "
                            f"({' '.join(cmd)}); log tail:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    self.start_seconds.append(time.monotonic() - began)
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        self.kill()
        pytest.fail(f"vLLM did not answer /health within {START_TIMEOUT_S:.0f} s; "
                    f"log tail:\n{self.log_tail()}")

    def stop(self, timeout: float = 60) -> None:
        """SIGTERM (vLLM stops its children), then SIGKILL the process group if it lingers."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        self._reap_group()

    def kill(self) -> None:
        """SIGKILL the server and its children at once, like a crash (the port can be reused)."""
        if self.proc is None:
            return
        self._reap_group(signal.SIGKILL)
        self.proc.wait(timeout=60)

    def restart(self, flags: Sequence[str] | None = None) -> VllmServer:
        """Stop (gracefully) and start again on the same port."""
        self.stop()
        return self.start(flags)

    def _reap_group(self, sig: signal.Signals = signal.SIGKILL) -> None:
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, sig)  # the group this server leads: only what it started
        except ProcessLookupError:
            pass


@pytest.fixture(scope="session")
def vllm_factory(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[Callable[..., VllmServer]]:
    """Start vLLM servers: ``factory(flags=DEFAULT_FLAGS, port=None)``; all are stopped at the end.

    The returned server can be killed (``kill()``, like a crash), stopped and started again on the
    same port (``start()`` / ``restart()``, optionally with other flags).
    """
    servers: list[VllmServer] = []
    log_dir = tmp_path_factory.mktemp("vllm")

    def start(flags: Sequence[str] = DEFAULT_FLAGS, port: int | None = None) -> VllmServer:
        server = VllmServer(tiny_model_dir, port or free_port(), log_dir)
        servers.append(server)
        return server.start(flags)

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def vllm_server(vllm_factory: Callable[..., VllmServer]) -> VllmServer:
    """The session's vLLM server, with the native token route enabled."""
    return vllm_factory()


@dataclass
class CaptureServer:
    """A vLLM server capturing hidden states through eaglefeed's connector into ``store_dir``."""

    server: VllmServer
    store_dir: Path
    layer_ids: tuple[int, ...]  # as configured (vLLM stores them ascending)
    dtype: str

    @property
    def url(self) -> str:
        return self.server.url


def capture_flags(store_dir: Path, layer_ids: Sequence[int], dtype: str,
                  store: str | None = None) -> tuple[str, ...]:
    """The two launch flags that turn capture on (the generate worker's contract); ``store``: put into it."""
    speculative = {"method": "extract_hidden_states", "num_speculative_tokens": 1,
                   "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": list(layer_ids)}}}
    transfer = {"kv_connector": "EaglefeedHiddenStatesConnector", "kv_role": "kv_producer",
                "kv_connector_module_path": "vllm_hidden_states",
                "kv_connector_extra_config": {"shared_storage_path": str(store_dir), "dtype": dtype,
                                              **({"store": store} if store else {})}}
    return ("--speculative-config", json.dumps(speculative), "--kv-transfer-config", json.dumps(transfer))


@pytest.fixture(scope="session")
def capture_vllm_factory(tiny_model_4_dir: Path, tmp_path_factory: pytest.TempPathFactory
                         ) -> Iterator[Callable[..., CaptureServer]]:
    """Start capture-enabled vLLM servers on the 4-layer model; all are stopped at the end.

    ``factory(layer_ids=(2, 4), dtype="bfloat16", flags=(), store_dir=None)``: ``layer_ids`` in
    vLLM's ids (0..4), ``dtype`` the connector's store dtype, ``flags`` extra vLLM flags after
    the defaults (``--enable-scale-out``; the engine itself computes in float32), ``store_dir``
    the connector's ``shared_storage_path`` (default: a new temporary dir), ``store`` its
    ``s3://.../hidden_states`` to put the files into and ``env`` more variables for the server
    (the store's ``AWS_*``). Each server gets ``VLLM_CPU_NUM_OF_RESERVED_CPU=1`` and PYTHONPATH =
    eaglefeed/plugins.
    """
    servers: list[VllmServer] = []
    log_dir = tmp_path_factory.mktemp("vllm-capture")

    def start(layer_ids: Sequence[int] = (2, CAPTURE_LAYERS_N), dtype: str = "bfloat16",
              flags: Sequence[str] = (), store_dir: Path | None = None, store: str | None = None,
              env: dict[str, str] | None = None) -> CaptureServer:
        store_dir = store_dir or tmp_path_factory.mktemp("hidden-states")
        extra = {"VLLM_CPU_NUM_OF_RESERVED_CPU": "1", "PYTHONPATH": str(PLUGINS_DIR), **(env or {})}
        server = VllmServer(tiny_model_4_dir, free_port(), log_dir, extra_env=extra)
        servers.append(server)
        server.start((*DEFAULT_FLAGS, *capture_flags(store_dir, layer_ids, dtype, store), *flags))
        return CaptureServer(server, store_dir, tuple(layer_ids), dtype)

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def capture_vllm(capture_vllm_factory: Callable[..., CaptureServer]
                 ) -> Iterator[Callable[..., CaptureServer]]:
    """``capture_vllm_factory`` for one test: the servers it starts are stopped when the test ends.

    Each vLLM takes about 4 GB: kept to the session's end, a few capture tests' servers filled
    the machine's memory and a later test's server could not start.
    """
    started: list[CaptureServer] = []

    def start(**settings: Any) -> CaptureServer:
        server = capture_vllm_factory(**settings)
        started.append(server)
        return server

    yield start
    for server in started:
        server.server.stop()


def run_greedy_reference(model_dir: Path, requests: Sequence[dict[str, Any]]) -> dict[Any, list[int]]:
    """Run scripts/engine/greedy_reference.py (transformers' generate) on model_dir; ids by request id."""
    lines = "".join(json.dumps(request) + "\n" for request in requests)
    cmd = [str(ENGINE_PYTHON), str(SCRIPTS / "greedy_reference.py"), str(model_dir)]
    result = subprocess.run(cmd, input=lines, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, f"greedy_reference.py failed:\n{result.stderr[-4000:]}"
    rows = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    return {row["id"]: row["output_ids"] for row in rows}


@pytest.fixture(scope="session")
def greedy_reference(tiny_model_dir: Path) -> Reference:
    """Run scripts/engine/greedy_reference.py (transformers' generate) on requests; ids by request id."""

    def run(requests: Sequence[dict[str, Any]]) -> dict[Any, list[int]]:
        return run_greedy_reference(tiny_model_dir, requests)

    return run
