"""Hidden-state capture on a real vLLM (CPU build): its cost in the generation pass, and one pass vs two.

Two figures, measured interleaved in one run on the 4-layer tiny Llama of the engine tests
(``scripts/engine/build_tiny_model.py --layers 4``, engine in float32), greedy, ``--new-tokens``
(default 48) new tokens, prompts of random ids whose lengths are spread uniformly over 64–1,500
tokens (seeded; the same lengths and ids in every pass):

1. **Capture overhead**: rows/s of the real pipeline (a local broker, ``eaglefeed generate`` with
   ``--concurrency`` (64) in flight, ``eaglefeed sink``; the prompts published as PromptRecords of
   token ids once both consumers have joined their groups), pass **A** with ``--hidden-states
   1,2,4 --hidden-states-dir`` against a capture-enabled vLLM (eaglefeed's connector, bf16
   store: every request sends ``kv_transfer_params: {"include_output_tokens": true}``, the worker
   waits for and checks each file, the sink checks its size and sha256), pass **B** without
   capture against a plain vLLM with the same flags otherwise. Reported per pass: steady rows/s
   (between the 10 % and the 90 % row by the rows' ``created_at``), the overall rate (from the
   first prompt published to the last row in the dataset) and output tokens; the figure is the
   ratio of the medians over the rounds, A/B (target ≥ 0.85), each round's ratio beside it.
2. **One pass vs the peers' way**: wall time to have the tokens and the states of every prompt.
   (a) is pass A. (b) is pass B (tokens without states) plus pass **C**: a second, prefill-only
   pass of each row's prompt + output (the ids B wrote) with ``max_tokens`` 1 to the
   capture-enabled vLLM *without* ``include_output_tokens`` (the connector's stock behaviour
   saves the prompt positions, i.e. every position of prompt + output: what speculators' and
   SpecForge's offline extraction do), ``--concurrency`` in flight from one asyncio client,
   until every file exists. The figure is median(B + C) / median(A) over the rounds (target ≥ 1.3).
   The file writes happen in both; in (a) the worker's and the sink's checks of each file are
   counted too, in (b) nothing reads the files.

Each round runs A, B, C, or B, C, A (alternating), so vLLM's drift over minutes weighs on both
sides alike; a warm-up of ``--concurrency`` requests goes to each server first. ``--direct`` adds
to each round the same generations sent by C's asyncio client instead of the pipeline, with
capture (DA: ``include_output_tokens``, done when the file exists, nothing checked) and without
(DB): DA/DB is vLLM's own share of the overhead, A/B minus it the pipeline's (the worker's and
the sink's checks on the clients' core). It also adds CB, C's prefill pass sent to the plain server
(no states): CB's time over C's is capture's cost on prefill alone, DA/DB on prefill + decode.

Each pass also reports, over its own window, the busy server's CPU seconds and rows per vLLM CPU
second (a figure the other work on this shared machine moves less: it takes core 1 from vLLM, not
work from it), and ``vllm_probe.Sampler``'s readings of the busy server (mean running requests,
inter-token time, generated tokens/s, each core's busy share, and the CPU share of processes
not ours on each core, ``cpu_share_other_cpuN``). ``--profile`` ends with one direct pass on each
server with py-spy on its ``VLLM::Worker`` process (model, sampler and connector), summed by function.

Cores (2 on this machine): both servers run for the whole run, **both pinned to core 1**
(``taskset`` and ``VLLM_CPU_OMP_THREADS_BIND=1``, ``VLLM_CPU_NUM_OF_RESERVED_CPU=1`` for both,
which the capture server needs and is the plain one's default), and only one is busy at a
time; this script, the broker, worker and sink (and C's client) run on core 0
(``vllm_pipeline_vs_direct.split_cores``). So each pass has the same core for vLLM and the same
core for the clients, and no restart between passes (a restart costs more than a pass here); the
idle server's CPU during each pass is reported, to show it took none of the busy one's core. Two
servers at once on one core each would not be fair (the pipeline would lose its core), and
restarting one server per pass would cost about a minute per pass. Prefix caching is off on both
(``--no-enable-prefix-caching``): the same prompts go to each server once per round, and C's
prompts must not find A's blocks; so every pass does the same work. The capture files
of a pass are deleted after it. Needs ``make engine-env``.

    python -m bench.capture_overhead                      # 5 rounds of 600 prompts, ~12 min
    python -m bench.capture_overhead --direct             # + CB, DA, DB each round, ~17 min
    python -m bench.capture_overhead --quick              # 2 rounds of 96 prompts (a smoke run)
    python -m bench.capture_overhead --prompts 400 --rounds 4 --new-tokens 32 --json-out f.json
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePath
from typing import Any

import aiohttp
import pyarrow.parquet as pq

from bench import harness, vllm_probe
from bench.vllm_pipeline_vs_direct import ENGINE_PYTHON, STEP_TOKENS, _wait_for_line, broker, split_cores
from eaglefeed.core.config import KafkaConfig, cache_dir
from eaglefeed.core.kafka import ensure_topics, pipeline_topics
from eaglefeed.dataset.hidden_states import read_header
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.devtools.startup import free_port, wait_healthy
from eaglefeed.schemas import PROMPT

REPO = Path(__file__).resolve().parents[1]
PLUGINS_DIR = REPO / "eaglefeed" / "plugins"
LAYERS_N = 4
LAYERS = (1, 2, 4)
STORE_DTYPE = "bfloat16"
MIN_LEN, MAX_LEN = 64, 1500
PARTITIONS = 6
PASS_TIMEOUT_S = 1200.0
NATIVE = "/inference/v1/generate"


# --- the model and the servers ---------------------------------------------------------------

def tiny_model_4() -> Path:
    """The engine tests' 4-layer tiny Llama (tests/engine/conftest.py's cache key), built if absent."""
    scripts = REPO / "scripts" / "engine"
    digest = hashlib.sha256((scripts / "build_tiny_model.py").read_bytes())
    for path in sorted(TOKENIZER_DIR.iterdir()):
        digest.update(path.name.encode() + path.read_bytes())
    target = cache_dir() / "engine-models" / f"tiny-llama-{LAYERS_N}l-{digest.hexdigest()[:16]}"
    if not (target / "model.safetensors").exists():
        staging = target.with_name(f"{target.name}.tmp{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        subprocess.run([str(ENGINE_PYTHON), str(scripts / "build_tiny_model.py"), str(staging),
                        "--layers", str(LAYERS_N)], check=True)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    return target


def capture_flags(store: Path, *, dtype: str = STORE_DTYPE, layers: tuple[int, ...] = LAYERS,
                  draft_tokens: bool = False) -> list[str]:
    """The two launch flags that turn eaglefeed's capture connector on (docs/DEPLOY.md).

    ``draft_tokens``: keep vLLM's one draft token per decoding request (the stock proposer; the
    connector's ``draft_tokens`` option), the baseline of docs/journal/capture-overhead.md.
    """
    spec = {"method": "extract_hidden_states", "num_speculative_tokens": 1,
            "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": list(layers)}}}
    kv = {"kv_connector": "EaglefeedHiddenStatesConnector", "kv_role": "kv_producer",
          "kv_connector_module_path": "vllm_hidden_states",
          "kv_connector_extra_config": {"shared_storage_path": str(store), "dtype": dtype,
                                        **({"draft_tokens": True} if draft_tokens else {})}}
    return ["--speculative-config", json.dumps(spec), "--kv-transfer-config", json.dumps(kv)]


@contextmanager
def server(model: Path, log: Path, core: int | None, store: Path | None, *, dtype: str = STORE_DTYPE,
           layers: tuple[int, ...] = LAYERS, draft_tokens: bool = False) -> Iterator[tuple[str, int]]:
    """A vLLM server (capturing ``layers`` as ``dtype`` into ``store`` unless None), on ``core``.

    Both kinds get the same environment and flags but the two capture flags. Yields its URL and
    its process group (for its CPU time).
    """
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(VLLM_CPU_KVCACHE_SPACE="2", HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1", TRANSFORMERS_OFFLINE="1",
               VLLM_CPU_NUM_OF_RESERVED_CPU="1", PYTHONPATH=str(PLUGINS_DIR))
    pin: list[str] = []
    if core is not None:
        pin, env["VLLM_CPU_OMP_THREADS_BIND"] = ["taskset", "-c", str(core)], str(core)
    cmd = [*pin, str(ENGINE_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
           "--served-model-name", "tiny-llama", "--host", "127.0.0.1", "--port", str(port),
           "--max-model-len", "2048", "--enforce-eager", "--dtype", "float32", "--enable-scale-out",
           "--max-num-batched-tokens", STEP_TOKENS, "--no-enable-prefix-caching",
           *(capture_flags(store, dtype=dtype, layers=layers, draft_tokens=draft_tokens) if store is not None else [])]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", process=proc, log=log, timeout=900)
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        harness.stop(proc)
        try:
            os.killpg(proc.pid, 9)  # the group it leads: its engine core and worker, if they linger
        except ProcessLookupError:
            pass


def group_cpu(pgid: int) -> float:
    """CPU seconds so far of every live process in the process group ``pgid`` (a server's)."""
    total = 0.0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(entry.path, "stat").read_text().rsplit(") ", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if int(fields[2]) == pgid:
            total += (int(fields[11]) + int(fields[12])) / harness.CLK_TCK
    return total


# --- prompts -----------------------------------------------------------------------------------

def prompt_ids(count: int, seed: int = 20261203) -> list[list[int]]:
    """``count`` prompts of random ids (10..3999 of the demo tokenizer's 4,096), 64–1,500 long."""
    rng = random.Random(seed)
    return [[rng.randrange(10, 4000) for _ in range(rng.randint(MIN_LEN, MAX_LEN))] for _ in range(count)]


def prompt_id(tag: str, i: int) -> str:
    """Prompt ``i``'s id in the pass ``tag`` (its rows are ``<id>:0``)."""
    return hashlib.sha256(f"{tag}-{i}".encode()).hexdigest()[:24]


def records(prompts: list[list[int]], tag: str, new_tokens: int) -> list[bytes]:
    """PromptRecords as the producer writes them (greedy), their ids unique to the pass ``tag``."""
    now = int(time.time() * 1000)
    out = []
    for i, ids in enumerate(prompts):
        out.append(PROMPT.encode({
            "prompt_id": prompt_id(tag, i), "source": "capture-bench",
            "source_row": str(i), "turn_index": 0, "input_ids": ids, "num_samples": 1,
            "sampling_params": {"max_new_tokens": new_tokens, "temperature": 0.0, "top_p": 1.0, "top_k": -1,
                                "min_p": 0.0, "stop_token_ids": [], "seed": i},
            "chat_template_kwargs": "{}", "tokenizer_id": str(TOKENIZER_DIR), "tokenizer_hash": "t",
            "chat_template_hash": "c", "created_at": now}))
    return out


def publish(kafka: KafkaConfig, values: list[bytes]) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap_servers, acks="all", linger_ms=5)
    futures = [producer.send(kafka.prompts_topic, key=b"k%d" % i, value=v, partition=i % PARTITIONS)
               for i, v in enumerate(values)]
    for fut in futures:
        fut.get(timeout=60)
    producer.close()


# --- the passes --------------------------------------------------------------------------------

def pipeline_pass(bootstrap: str, prompts: list[list[int]], url: str, work: Path, *, concurrency: int,
                  new_tokens: int, store: Path | None, pgids: tuple[int, int]) -> dict[str, Any]:
    """One pipeline pass (capture on when ``store`` is given): its figures, and each prompt's output ids."""
    work.mkdir()
    common = ["--bootstrap-servers", bootstrap, "--topic-prefix", work.name]
    kafka = KafkaConfig(bootstrap_servers=bootstrap, topic_prefix=work.name)
    ensure_topics(kafka, pipeline_topics(kafka, PARTITIONS))
    out = work / "dataset"
    out.mkdir()
    capture: list[str] = []
    if store is not None:
        (out / "hidden_states").symlink_to(store)  # the server's folder is the dataset's store
        capture = ["--hidden-states", ",".join(map(str, LAYERS)), "--hidden-states-dir", str(store),
                   "--hidden-states-dtype", STORE_DTYPE]
    values = records(prompts, work.name, new_tokens)
    procs = {"worker": harness.spawn(["generate", "--sglang-url", url, "--concurrency", str(concurrency),
                                      *capture, *common], log=work / "worker.log"),
             "sink": harness.spawn(["sink", "--output", str(out), "--flush-seconds", "0.5", *common],
                                   log=work / "sink.log")}
    try:
        _wait_for_line(work / "worker.log", "the group settled", procs["worker"], timeout=120)
        _wait_for_line(work / "sink.log", "assigned", procs["sink"], timeout=120)
        cpu_before = [group_cpu(pg) for pg in pgids]
        started = time.time()
        publish(kafka, values)
        while harness.dataset_rows(out) < len(prompts):
            if any(p.poll() is not None for p in procs.values()):
                raise RuntimeError(f"a pipeline process exited; logs in {work}")
            if time.time() - started > PASS_TIMEOUT_S:
                raise RuntimeError(f"{work.name}: no {len(prompts)} rows within {PASS_TIMEOUT_S:.0f} s; logs in {work}")
            time.sleep(0.05)
        finished = time.time()
        busy, idle = (group_cpu(pg) - b for pg, b in zip(pgids, cpu_before, strict=True))
    finally:
        for proc in procs.values():
            harness.stop(proc)
    table = pq.read_table(out / "segments", columns=["id", "created_at", "input_ids", "prompt_len",
                                                     "hidden_states"]).to_pylist()
    if len({r["id"] for r in table}) != len(prompts):
        raise RuntimeError(f"{work.name}: {len(table)} rows for {len(prompts)} prompts; logs in {work}")
    with_states = sum(1 for r in table if r["hidden_states"])
    if with_states != (len(prompts) if store is not None else 0):
        raise RuntimeError(f"{work.name}: {with_states} of {len(table)} rows hold hidden states")
    stamps = [r["created_at"].timestamp() for r in table]
    index = {prompt_id(work.name, i): i for i in range(len(prompts))}
    by_row = {index[r["id"].split(":")[0]]: r for r in table}
    outputs = [by_row[i]["input_ids"][by_row[i]["prompt_len"]:] for i in range(len(prompts))]
    stored = _clear(store) if store is not None else 0.0
    wall = finished - started
    return {"steady_rows_per_s": round(vllm_probe.steady(stamps)["steady_rows_per_s"], 2),
            "overall_rows_per_s": round(len(prompts) / wall, 2), "wall_s": round(wall, 2),
            "first_row_s": round(min(stamps) - started, 2),
            "output_tokens": sum(len(o) for o in outputs), "stored_mb": stored,
            **_cpu_figures(len(prompts), busy, idle), "_outputs": outputs, "_window": (started, finished)}


def prefill_pass(url: str, sequences: list[list[int]], store: Path, tag: str, *, concurrency: int,
                 pgids: tuple[int, int]) -> dict[str, Any]:
    """The peers' second pass: each prompt + output once more, ``max_tokens`` 1, to the capture server."""
    params = {"max_tokens": 1, "temperature": 0.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0}
    figures, paths, _ = direct_pass(url, sequences, store, tag, params=params, extra={}, concurrency=concurrency,
                                    pgids=pgids)
    # the stock behaviour (no include_output_tokens) saved every position of what was sent
    _, shape, _, _ = read_header(paths[0]).tensors["hidden_states"]
    if shape[0] != len(sequences[0]) or shape[1] != len(LAYERS):
        raise RuntimeError(f"{tag}: a prefill file holds {shape} for {len(sequences[0])} positions")
    figures["stored_mb"] = _clear(store)
    return figures


def direct_pass(url: str, sequences: list[list[int]], store: Path | None, tag: str, *, params: dict[str, Any],
                extra: dict[str, Any], concurrency: int, pgids: tuple[int, int]
                ) -> tuple[dict[str, Any], list[Path], list[list[int]]]:
    """``sequences`` straight to vLLM's token route from one asyncio client, ``concurrency`` in flight.

    With a ``store`` each response must name a hidden-state file, and a request counts as done
    once its file exists. Returns the figures, the files and the output ids.
    """
    cpu_before = [group_cpu(pg) for pg in pgids]
    started = time.time()
    paths, stamps, outputs = asyncio.run(_direct(url, sequences, store, tag, params, extra, concurrency))
    wall = time.time() - started
    figures = {"wall_s": round(wall, 2), "overall_rows_per_s": round(len(sequences) / wall, 2),
               "steady_rows_per_s": round(vllm_probe.steady(stamps)["steady_rows_per_s"], 2),
               **_cpu_figures(len(sequences), *(group_cpu(pg) - b for pg, b in zip(pgids, cpu_before, strict=True))),
               "_window": (started, started + wall)}
    return figures, paths, outputs


def _cpu_figures(rows: int, busy: float, idle: float) -> dict[str, float]:
    """The busy server's CPU seconds over a pass and its rows per CPU second (insensitive to what else
    ran on its core), and the idle server's CPU seconds (near zero: it took nothing from the busy one)."""
    return {"vllm_cpu_s": round(busy, 2), "rows_per_vllm_cpu_s": round(rows / busy, 2) if busy else 0.0,
            "idle_server_cpu_s": round(idle, 2)}


def _clear(store: Path) -> float:
    """Delete the store's files; their total size in MB."""
    stored = 0
    for f in store.iterdir():
        stored += f.stat().st_size
        f.unlink()
    return round(stored / 1e6, 1)


async def _direct(url: str, sequences: list[list[int]], store: Path | None, tag: str, params: dict[str, Any],
                  extra: dict[str, Any], concurrency: int) -> tuple[list[Path], list[float], list[list[int]]]:
    sem = asyncio.Semaphore(concurrency)
    stamps: list[float] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency),
                                     timeout=aiohttp.ClientTimeout(total=PASS_TIMEOUT_S)) as http:
        async def one(i: int, ids: list[int]) -> tuple[Path | None, list[int]]:
            async with sem:
                body = {"request_id": f"{tag}-{i}", "token_ids": ids, "sampling_params": params, **extra}
                async with http.post(f"{url}{NATIVE}", json=body) as resp:
                    data = await resp.json()
            if "choices" not in data:
                raise RuntimeError(f"vLLM refused {tag}-{i}: {str(data)[:300]}")
            output = list(data["choices"][0]["token_ids"])
            if store is None:
                stamps.append(time.time())
                return None, output
            named = (data.get("kv_transfer_params") or {}).get("hidden_states_path")
            if not named:
                raise RuntimeError(f"the capture server named no file for {tag}-{i}: {str(data)[:300]}")
            local = store / PurePath(named).name
            pause, deadline = 0.002, time.monotonic() + 60
            while not local.exists():  # the file may come after the response (written, renamed)
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{local} did not appear")
                await asyncio.sleep(pause)
                pause = min(2 * pause, 0.05)
            stamps.append(time.time())
            return local, output

        done = await asyncio.gather(*(one(i, ids) for i, ids in enumerate(sequences)))
    return [p for p, _ in done if p is not None], stamps, [o for _, o in done]


def generate_direct(url: str, prompts: list[list[int]], store: Path | None, tag: str, *, new_tokens: int,
                    concurrency: int, pgids: tuple[int, int]) -> dict[str, Any]:
    """The pipeline's generation requests from the direct client (``--direct``): no Kafka, no checks."""
    params = {"max_tokens": new_tokens, "temperature": 0.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0}
    extra = {"kv_transfer_params": {"include_output_tokens": True}} if store is not None else {}
    figures, _, outputs = direct_pass(url, prompts, store, tag, params=params, extra=extra,
                                      concurrency=concurrency, pgids=pgids)
    figures["output_tokens"] = sum(map(len, outputs))
    if store is not None:
        figures["stored_mb"] = _clear(store)
    return figures


def profile_pass(url: str, pgids: tuple[int, int], prompts: list[list[int]], store: Path | None, work: Path,
                 tag: str, *, new_tokens: int, concurrency: int, top: int = 25) -> dict[str, Any]:
    """``generate_direct`` with py-spy on the busy server's model process (``VLLM::Worker``, where the
    model, the sampler and the connector run): where its time goes (``vllm_probe.profile_summary``)."""
    worker = next(pid for pid in _group(pgids[0])
                  if Path(f"/proc/{pid}/comm").read_text().startswith("VLLM::Worker"))
    raw = work / f"{tag}.pyspy"
    spy = vllm_probe.py_spy(worker, raw)
    time.sleep(1)
    try:
        figures = generate_direct(url, prompts, store, tag, new_tokens=new_tokens, concurrency=concurrency,
                                  pgids=pgids)
    finally:
        spy.send_signal(signal.SIGINT)  # py-spy writes its file when interrupted
        spy.wait(timeout=120)
    figures.pop("_window")
    return {**figures, "profile": vllm_probe.profile_summary(raw, top=top)}


def _group(pgid: int) -> list[int]:
    """The live processes of the process group ``pgid``."""
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if int(Path(entry.path, "stat").read_text().rsplit(") ", 1)[1].split()[2]) == pgid:
                    pids.append(int(entry.name))
            except (FileNotFoundError, ProcessLookupError, IndexError):
                pass
    return pids


def warm_up(url: str, prompts: list[list[int]], capture: bool, concurrency: int, store: Path | None) -> None:
    """``concurrency`` generations of the first prompts, to warm the server (its files deleted)."""
    async def run() -> None:
        params = {"max_tokens": 8, "temperature": 0.0}
        extra = {"kv_transfer_params": {"include_output_tokens": True}} if capture else {}
        async with aiohttp.ClientSession() as http:
            async def one(i: int, ids: list[int]) -> None:
                body = {"request_id": f"warm-{capture}-{i}", "token_ids": ids, "sampling_params": params, **extra}
                async with http.post(f"{url}{NATIVE}", json=body) as resp:
                    resp.raise_for_status()
                    await resp.json()
            await asyncio.gather(*(one(i, ids) for i, ids in enumerate(prompts[:concurrency])))

    asyncio.run(run())
    if store is not None:
        time.sleep(1)
        for f in store.iterdir():
            f.unlink()


# --- the run -----------------------------------------------------------------------------------

def order(rounds: int, direct: bool = False) -> list[list[str]]:
    """Each round's passes: A, B, C, then B, C, A, alternating (C needs B's outputs); ``direct``
    adds CB, DA, DB (then B, CB, C, A, DB, DA)."""
    if direct:
        return [["A", "B", "C", "CB", "DA", "DB"] if r % 2 == 0 else ["B", "CB", "C", "A", "DB", "DA"]
                for r in range(rounds)]
    return [["A", "B", "C"] if r % 2 == 0 else ["B", "C", "A"] for r in range(rounds)]


def median(values: list[float]) -> float:
    return statistics.median(values)


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the rounds, the two ratios, and each round's ratios."""
    a = [r["A"] for r in rounds]
    b = [r["B"] for r in rounds]
    c = [r["C"] for r in rounds]
    two_pass = [rb["wall_s"] + rc["wall_s"] for rb, rc in zip(b, c, strict=True)]
    med = {"A_steady_rows_per_s": median([x["steady_rows_per_s"] for x in a]),
           "B_steady_rows_per_s": median([x["steady_rows_per_s"] for x in b]),
           "A_overall_rows_per_s": median([x["overall_rows_per_s"] for x in a]),
           "B_overall_rows_per_s": median([x["overall_rows_per_s"] for x in b]),
           "A_wall_s": median([x["wall_s"] for x in a]), "B_wall_s": median([x["wall_s"] for x in b]),
           "C_wall_s": median([x["wall_s"] for x in c]), "B_plus_C_wall_s": median(two_pass)}
    return {
        "medians": med,
        "capture_overhead_steady": round(med["A_steady_rows_per_s"] / med["B_steady_rows_per_s"], 3),
        "capture_overhead_overall": round(med["A_overall_rows_per_s"] / med["B_overall_rows_per_s"], 3),
        "one_pass_vs_two": round(med["B_plus_C_wall_s"] / med["A_wall_s"], 3),
        "capture_overhead_per_vllm_cpu": round(median([x["rows_per_vllm_cpu_s"] for x in a])
                                               / median([x["rows_per_vllm_cpu_s"] for x in b]), 3),
        "rounds_capture_overhead_per_vllm_cpu": [round(x["rows_per_vllm_cpu_s"] / y["rows_per_vllm_cpu_s"], 3)
                                                 for x, y in zip(a, b, strict=True)],
        "rounds_capture_overhead_steady": [round(x["steady_rows_per_s"] / y["steady_rows_per_s"], 3)
                                           for x, y in zip(a, b, strict=True)],
        "rounds_capture_overhead_overall": [round(x["overall_rows_per_s"] / y["overall_rows_per_s"], 3)
                                            for x, y in zip(a, b, strict=True)],
        "rounds_one_pass_vs_two": [round(t / x["wall_s"], 3) for t, x in zip(two_pass, a, strict=True)],
        **(_direct_summary(rounds) if "DA" in rounds[0] else {}),
    }


def _direct_summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The direct client's capture / plain ratio (``--direct``): vLLM's own share of the overhead."""
    da, db = [r["DA"] for r in rounds], [r["DB"] for r in rounds]
    out: dict[str, Any] = {}
    for figure in ("steady", "overall"):
        a = median([x[f"{figure}_rows_per_s"] for x in da])
        b = median([x[f"{figure}_rows_per_s"] for x in db])
        out[f"direct_{figure}_medians"] = {"DA": a, "DB": b}
        out[f"direct_capture_overhead_{figure}"] = round(a / b, 3)
        out[f"rounds_direct_capture_overhead_{figure}"] = [
            round(x[f"{figure}_rows_per_s"] / y[f"{figure}_rows_per_s"], 3) for x, y in zip(da, db, strict=True)]
    c, cb = [r["C"]["wall_s"] for r in rounds], [r["CB"]["wall_s"] for r in rounds]
    out["prefill_wall_medians"] = {"C": median(c), "CB": median(cb)}
    out["prefill_capture_overhead"] = round(median(cb) / median(c), 3)  # a rate ratio: plain time / capture time
    out["rounds_prefill_capture_overhead"] = [round(y / x, 3) for x, y in zip(c, cb, strict=True)]
    return out


def run(*, prompts: int, rounds: int, new_tokens: int, concurrency: int, pin: bool = True, direct: bool = False,
        profile: bool = False, draft_tokens: bool = False) -> dict[str, Any]:
    core = split_cores(pin)
    model = tiny_model_4()
    work = Path(tempfile.mkdtemp(prefix="eaglefeed-capture-bench-"))
    store = work / "hidden_states"
    store.mkdir()
    ids = prompt_ids(prompts)
    results: list[dict[str, Any]] = []
    with server(model, work / "vllm-plain.log", core, None) as (plain_url, plain_pg), \
            server(model, work / "vllm-capture.log", core, store, draft_tokens=draft_tokens) as (cap_url, cap_pg), \
            broker() as (bootstrap, _broker_pid), \
            vllm_probe.Sampler(plain_url, plain_pg, every=0.5) as plain_sampler, \
            vllm_probe.Sampler(cap_url, cap_pg, every=0.5) as cap_sampler:
        warm_up(plain_url, ids, False, concurrency, None)
        warm_up(cap_url, ids, True, concurrency, store)
        for r, passes in enumerate(order(rounds, direct)):
            got: dict[str, Any] = {}
            for side in passes:
                tag = f"r{r}{side.lower()}"
                if side == "C":
                    seqs = [p + o for p, o in zip(ids, got["B"]["_outputs"], strict=True)]
                    got["C"] = prefill_pass(cap_url, seqs, store, tag, concurrency=concurrency, pgids=(cap_pg, plain_pg))
                elif side == "CB":
                    seqs = [p + o for p, o in zip(ids, got["B"]["_outputs"], strict=True)]
                    params = {"max_tokens": 1, "temperature": 0.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0}
                    got["CB"] = direct_pass(plain_url, seqs, None, tag, params=params, extra={},
                                            concurrency=concurrency, pgids=(plain_pg, cap_pg))[0]
                elif side in ("DA", "DB"):
                    capture = side == "DA"
                    got[side] = generate_direct(cap_url if capture else plain_url, ids, store if capture else None,
                                                tag, new_tokens=new_tokens, concurrency=concurrency,
                                                pgids=(cap_pg, plain_pg) if capture else (plain_pg, cap_pg))
                else:
                    capture = side == "A"
                    got[side] = pipeline_pass(bootstrap, ids, cap_url if capture else plain_url, work / tag,
                                              concurrency=concurrency, new_tokens=new_tokens,
                                              store=store if capture else None,
                                              pgids=(cap_pg, plain_pg) if capture else (plain_pg, cap_pg))
                    shutil.rmtree(work / tag / "dataset", ignore_errors=True)
                sampler = cap_sampler if side in ("A", "C", "DA") else plain_sampler
                got[side]["vllm"] = _readings(sampler.window(*got[side].pop("_window")))
                shown = {k: v for k, v in got[side].items() if not k.startswith("_")}
                print(f"round {r} {side}: {json.dumps(shown)}", file=sys.stderr, flush=True)
            if got["A"]["_outputs"] != got["B"]["_outputs"]:
                print(f"round {r}: capture changed some greedy outputs (A vs B)", file=sys.stderr, flush=True)
            for side in ("A", "B"):
                got[side].pop("_outputs")
            results.append(got)
        profiles = {}
        if profile:  # one direct pass on each server under py-spy (its figures apart: py-spy shares core 0)
            for side, url, pgids, st in (("capture", cap_url, (cap_pg, plain_pg), store),
                                         ("plain", plain_url, (plain_pg, cap_pg), None)):
                profiles[side] = profile_pass(url, pgids, ids, st, work, f"profile-{side}", new_tokens=new_tokens,
                                              concurrency=concurrency)
                print(f"profile {side}: {json.dumps(profiles[side])}", file=sys.stderr, flush=True)
    shutil.rmtree(work)  # kept, with the logs, when a run fails
    return {"prompts": prompts, "rounds": rounds, "new_tokens": new_tokens, "concurrency": concurrency,
            "layers": list(LAYERS), "store_dtype": STORE_DTYPE, "draft_tokens": draft_tokens,
            "prompt_tokens": sum(map(len, ids)),
            "pinned": core is not None, "order": order(rounds, direct), "load_average": os.getloadavg(),
            "per_round": results, **summarise(results),
            **({"profiles": profiles} if profiles else {})}


def run_draft_ab(*, prompts: int, rounds: int, new_tokens: int, concurrency: int, pin: bool = True
                 ) -> dict[str, Any]:
    """``--draft-ab``: the connector's no-draft decode against vLLM's draft token, interleaved.

    Three servers on the same core, one busy at a time, the direct client only: **DA** capture
    as shipped (no draft token), **DD** capture keeping vLLM's draft token (``draft_tokens``),
    **DB** no capture. Rounds alternate DA, DD, DB and DB, DD, DA; the outputs of the three must
    be the same greedy ids.
    """
    core = split_cores(pin)
    model = tiny_model_4()
    work = Path(tempfile.mkdtemp(prefix="eaglefeed-capture-draft-ab-"))
    stores = {"DA": work / "hs-nodraft", "DD": work / "hs-draft"}
    for store in stores.values():
        store.mkdir()
    ids = prompt_ids(prompts)
    results: list[dict[str, Any]] = []
    with server(model, work / "vllm-plain.log", core, None) as (plain_url, plain_pg), \
            server(model, work / "vllm-nodraft.log", core, stores["DA"]) as (nd_url, nd_pg), \
            server(model, work / "vllm-draft.log", core, stores["DD"], draft_tokens=True) as (dd_url, dd_pg), \
            vllm_probe.Sampler(plain_url, plain_pg, every=0.5) as plain_sampler, \
            vllm_probe.Sampler(nd_url, nd_pg, every=0.5) as nd_sampler, \
            vllm_probe.Sampler(dd_url, dd_pg, every=0.5) as dd_sampler:
        sides = {"DA": (nd_url, nd_pg, nd_sampler), "DD": (dd_url, dd_pg, dd_sampler),
                 "DB": (plain_url, plain_pg, plain_sampler)}
        warm_up(plain_url, ids, False, concurrency, None)
        warm_up(nd_url, ids, True, concurrency, stores["DA"])
        warm_up(dd_url, ids, True, concurrency, stores["DD"])
        for r in range(rounds):
            got: dict[str, Any] = {}
            for side in (["DA", "DD", "DB"] if r % 2 == 0 else ["DB", "DD", "DA"]):
                url, pg, sampler = sides[side]
                others = [p for s, (_u, p, _s) in sides.items() if s != side]
                params = {"max_tokens": new_tokens, "temperature": 0.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0}
                store = stores.get(side)
                extra = {"kv_transfer_params": {"include_output_tokens": True}} if store is not None else {}
                figures, _, outputs = direct_pass(url, ids, store, f"r{r}{side.lower()}", params=params,
                                                  extra=extra, concurrency=concurrency, pgids=(pg, others[0]))
                figures["output_tokens"] = sum(map(len, outputs))
                if store is not None:
                    figures["stored_mb"] = _clear(store)
                figures["vllm"] = _readings(sampler.window(*figures.pop("_window")))
                figures["_outputs"] = outputs
                got[side] = figures
                shown = {k: v for k, v in figures.items() if not k.startswith("_")}
                print(f"round {r} {side}: {json.dumps(shown)}", file=sys.stderr, flush=True)
            outputs_equal = got["DA"]["_outputs"] == got["DD"]["_outputs"] == got["DB"]["_outputs"]
            if not outputs_equal:
                print(f"round {r}: greedy outputs differ between DA, DD and DB", file=sys.stderr, flush=True)
            for side in got.values():
                side.pop("_outputs")
            results.append({**got, "outputs_equal": outputs_equal})
    shutil.rmtree(work)
    out: dict[str, Any] = {"prompts": prompts, "rounds": rounds, "new_tokens": new_tokens,
                           "concurrency": concurrency, "layers": list(LAYERS), "store_dtype": STORE_DTYPE,
                           "pinned": core is not None, "load_average": os.getloadavg(), "per_round": results}
    for a, b in (("DA", "DB"), ("DD", "DB"), ("DA", "DD")):
        for figure in ("rows_per_vllm_cpu_s", "steady_rows_per_s"):
            num = median([x[a][figure] for x in results])
            den = median([x[b][figure] for x in results])
            out[f"{a}/{b}_{figure}"] = round(num / den, 3)
            out[f"rounds_{a}/{b}_{figure}"] = [round(x[a][figure] / x[b][figure], 3) for x in results]
    return out


def draft_ab_table(result: dict[str, Any]) -> str:
    """``--draft-ab``'s figures, one line per ratio."""
    lines = [f"{result['prompts']} prompts, {result['new_tokens']} new tokens, {result['concurrency']} in flight, "
             f"{result['rounds']} rounds; load average {', '.join(f'{x:.1f}' for x in result['load_average'])}",
             "DA capture (no draft token), DD capture (vLLM's draft token), DB no capture"]
    for pair in ("DA/DB", "DD/DB", "DA/DD"):
        for figure in ("rows_per_vllm_cpu_s", "steady_rows_per_s"):
            lines.append(f"{pair} {figure} (ratio of medians): {result[f'{pair}_{figure}']:.3f} "
                         f"(rounds {result[f'rounds_{pair}_{figure}']})")
    lines.append(f"greedy outputs equal in every round: {all(r['outputs_equal'] for r in result['per_round'])}")
    return "\n".join(lines)


READINGS = ("vllm_running_mean", "vllm_waiting_mean", "vllm_inter_token_mean_s", "vllm_generation_tokens_per_s",
            "cpu0_busy", "cpu1_busy", "top_other")


def _readings(window: dict[str, Any]) -> dict[str, Any]:
    """The busy server's gauges and the cores' use over a pass (``vllm_probe.Sampler``), rounded."""
    out = {k: round(v, 3) if isinstance(v, float) else v for k, v in window.items()
           if k in READINGS or k.startswith("cpu_share_")}
    return out


def table(result: dict[str, Any]) -> str:
    """The per-round passes and the medians, then the two ratios against their targets."""
    lines = [f"{result['prompts']} prompts ({result['prompt_tokens']:,} prompt tokens, {MIN_LEN}-{MAX_LEN} each), "
             f"{result['new_tokens']} new tokens, {result['concurrency']} in flight, layers {result['layers']} "
             f"{result['store_dtype']}; load average {', '.join(f'{x:.1f}' for x in result['load_average'])}",
             "",
             "| round | A capture rows/s steady / overall | B plain rows/s steady / overall | A/B steady | "
             "A wall s | B wall s | C prefill wall s | (B+C)/A |",
             "|---|---|---|---|---|---|---|---|"]
    for r, got in enumerate(result["per_round"]):
        a, b, c = got["A"], got["B"], got["C"]
        lines.append(f"| {r} | {a['steady_rows_per_s']:.1f} / {a['overall_rows_per_s']:.1f} | "
                     f"{b['steady_rows_per_s']:.1f} / {b['overall_rows_per_s']:.1f} | "
                     f"{result['rounds_capture_overhead_steady'][r]:.3f} | {a['wall_s']:.1f} | {b['wall_s']:.1f} | "
                     f"{c['wall_s']:.1f} | {result['rounds_one_pass_vs_two'][r]:.3f} |")
    m = result["medians"]
    lines.append(f"| median | {m['A_steady_rows_per_s']:.1f} / {m['A_overall_rows_per_s']:.1f} | "
                 f"{m['B_steady_rows_per_s']:.1f} / {m['B_overall_rows_per_s']:.1f} | "
                 f"{result['capture_overhead_steady']:.3f} | {m['A_wall_s']:.1f} | {m['B_wall_s']:.1f} | "
                 f"{m['C_wall_s']:.1f} | {result['one_pass_vs_two']:.3f} |")
    ok1 = "met" if result["capture_overhead_steady"] >= 0.85 else "NOT met"
    ok2 = "met" if result["one_pass_vs_two"] >= 1.3 else "NOT met"
    lines += ["",
              f"capture overhead, with/without (medians, steady): {result['capture_overhead_steady']:.3f} "
              f"(overall {result['capture_overhead_overall']:.3f}); target >= 0.85: {ok1}",
              f"one pass vs two, (B + C) / A wall time (medians): {result['one_pass_vs_two']:.3f}; "
              f"target >= 1.3: {ok2}",
              f"capture overhead per vLLM CPU second (rows / the busy server's CPU s, medians): "
              f"{result['capture_overhead_per_vllm_cpu']:.3f} (rounds {result['rounds_capture_overhead_per_vllm_cpu']})"]
    if "direct_capture_overhead_steady" in result:
        d = result["direct_steady_medians"]
        lines.append(f"direct client (no Kafka, no checks), capture / plain (medians, steady): "
                     f"{d['DA']:.1f} / {d['DB']:.1f} rows/s = {result['direct_capture_overhead_steady']:.3f} "
                     f"(overall {result['direct_capture_overhead_overall']:.3f}; rounds "
                     f"{result['rounds_direct_capture_overhead_steady']})")
        p = result["prefill_wall_medians"]
        lines.append(f"prefill only (C's requests), capture / plain rate (medians): {p['CB']:.1f} s / {p['C']:.1f} s = "
                     f"{result['prefill_capture_overhead']:.3f} (rounds {result['rounds_prefill_capture_overhead']})")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, help="prompts per pass (default 600; --quick 96)")
    parser.add_argument("--rounds", type=int, help="rounds of A, B, C (default 5; --quick 2)")
    parser.add_argument("--new-tokens", type=int, default=48, help="max_new_tokens, greedy (default 48)")
    parser.add_argument("--concurrency", type=int, default=64, help="requests in flight, every pass (default 64)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 96 prompts, 2 rounds (with so few more prompts than "
                             "in flight the rows finish in waves: its figures mean little)")
    parser.add_argument("--no-pin", action="store_true", help="let vLLM and the clients share every core")
    parser.add_argument("--direct", action="store_true",
                        help="each round also the same generations from a direct asyncio client, with "
                             "capture (DA) and without (DB): vLLM's own share of the overhead")
    parser.add_argument("--profile", action="store_true",
                        help="after the rounds, one direct pass on each server with py-spy on its VLLM::Worker")
    parser.add_argument("--json-out", type=Path, help="also write every figure as JSON here")
    parser.add_argument("--draft-tokens", action="store_true",
                        help="the capture server keeps vLLM's draft token per decode step (the stock "
                             "extract_hidden_states proposer): the baseline before the connector dropped it")
    parser.add_argument("--draft-ab", action="store_true",
                        help="only direct passes on three servers: capture without the draft token (DA), with "
                             "it (DD), no capture (DB), interleaved (run_draft_ab)")
    args = parser.parse_args()
    prompts = args.prompts or (96 if args.quick else 600)
    rounds = args.rounds or (2 if args.quick else 5)
    if args.draft_ab:
        ab = run_draft_ab(prompts=prompts, rounds=rounds, new_tokens=args.new_tokens,
                          concurrency=args.concurrency, pin=not args.no_pin)
        if args.json_out:
            args.json_out.write_text(json.dumps(ab, indent=2))
        print(draft_ab_table(ab))
        return
    result = run(prompts=prompts, rounds=rounds, new_tokens=args.new_tokens, concurrency=args.concurrency,
                 pin=not args.no_pin, direct=args.direct, profile=args.profile,
                 draft_tokens=args.draft_tokens)
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=2))
    print(table(result))


if __name__ == "__main__":
    main()
