"""Pipeline vs the direct async script against one real vLLM (CPU build, tiny seeded Llama), same concurrency.

(a) direct: tokenize every prompt with the chat template, then one asyncio loop (aiohttp and a
    semaphore) sends the ids to vLLM's token route ``/inference/v1/generate`` and appends JSONL;
(b) pipeline: ``eaglefeed produce`` → Kafka → ``eaglefeed generate`` (engine detected: vLLM) →
    ``eaglefeed sink``, the producer started after the consumers joined their groups.
Both ask for the same sampling (``max_new_tokens`` 32, temperature 0.6, no top-k/top-p,
seeded) on the same prompts. Needs ``make engine-env``. Reported: prompts/s of each and (b)/(a).

    python -m bench.vllm_pipeline_vs_direct --prompts 1000 --concurrency 64
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import aiohttp

from bench import harness
from bench.pipeline_vs_direct import render_ids
from eaglefeed.core.config import KafkaConfig, cache_dir
from eaglefeed.core.kafka import ensure_topics, pipeline_topics
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.devtools.startup import free_port, wait_healthy

REPO = Path(__file__).resolve().parents[1]
ENGINE_PYTHON = Path(os.environ.get("EAGLEFEED_ENGINE_VENV", REPO / ".venv-engine")) / "bin" / "python"
MAX_NEW_TOKENS = 32
SAMPLING = {"max_tokens": MAX_NEW_TOKENS, "temperature": 0.6, "top_p": 1.0, "top_k": -1, "min_p": 0.0}
# vLLM CPU 0.32.0's engine core dies when a seeded request's prefill is chunked (it rewinds the
# request's generator, which CPU generators refuse: "CPU Generator does not use offset"); a step
# budget above all concurrent prompts together keeps prefills whole.
STEP_TOKENS = "131072"


def tiny_model() -> Path:
    """The tiny Llama of the engine tests (built by scripts/engine/build_tiny_model.py if absent)."""
    found = sorted((cache_dir() / "engine-models").glob("tiny-llama-*/model.safetensors"))
    if found:
        return found[-1].parent
    target = cache_dir() / "engine-models" / "tiny-llama-bench"
    subprocess.run([str(ENGINE_PYTHON), str(REPO / "scripts" / "engine" / "build_tiny_model.py"), str(target)],
                   check=True)
    return target


@contextmanager
def vllm(model: Path, log: Path) -> Iterator[str]:
    """A vLLM server with the token route on a free port; yields its URL."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(VLLM_CPU_KVCACHE_SPACE="1", HF_HUB_OFFLINE="1", VLLM_NO_USAGE_STATS="1")
    cmd = [str(ENGINE_PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
           "--served-model-name", "tiny-llama", "--host", "127.0.0.1", "--port", str(port),
           "--max-model-len", "2048", "--enforce-eager", "--dtype", "float32", "--enable-scale-out",
           "--max-num-batched-tokens", STEP_TOKENS]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, process=proc, log=log, timeout=600)
        yield url
    finally:
        harness.stop(proc)


def write_prompts(path: Path, count: int) -> tuple[Path, int]:
    """harness.write_prompts without the rows' own sampling params (both sides ask the same), and
    without the rows too long for the tiny model's 2048-token context; returns the file and its rows."""
    harness.write_prompts(path, count)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    kept = [{k: v for k, v in r.items() if k != "sampling_params"} for r in rows]
    kept = [r for r, ids in zip(kept, render(kept), strict=True) if len(ids) + MAX_NEW_TOKENS <= 2048]
    path.write_text("".join(json.dumps(r) + "\n" for r in kept))
    return path, len(kept)


def render(rows: list[dict]) -> list[list[int]]:
    """The chat-template token ids of each row's prompt, as the direct script computes them."""
    from transformers import AutoTokenizer

    return render_ids(AutoTokenizer.from_pretrained(str(TOKENIZER_DIR)), rows)


async def direct(source: Path, url: str, concurrency: int, out: Path) -> float:
    """The direct script; returns its wall time."""
    started = time.monotonic()
    jobs = render([json.loads(line) for line in source.read_text().splitlines()])
    sem = asyncio.Semaphore(concurrency)
    with open(out, "w") as fh:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as http:
            async def one(i: int, ids: list[int]) -> None:
                async with sem:
                    body = {"request_id": f"d{i}", "token_ids": ids,
                            "sampling_params": {**SAMPLING, "seed": i}}
                    async with http.post(f"{url}/inference/v1/generate", json=body) as resp:
                        data = await resp.json()
                if "choices" not in data:
                    raise RuntimeError(f"vLLM refused prompt {i}: {data}")
                fh.write(json.dumps({"input_ids": ids, "output_ids": data["choices"][0]["token_ids"]}) + "\n")

            await asyncio.gather(*(one(i, ids) for i, ids in enumerate(jobs)))
    return time.monotonic() - started


def pipeline(bootstrap: str, source: Path, url: str, concurrency: int, work: Path, prompts: int) -> float:
    """The pipeline with one worker; returns the wall time from the producer's start to the last row."""
    common = ["--bootstrap-servers", bootstrap, "--topic-prefix", "bench"]
    kafka = KafkaConfig(bootstrap_servers=bootstrap, topic_prefix="bench")
    ensure_topics(kafka, pipeline_topics(kafka, 6))
    out = work / "dataset"
    procs = [harness.spawn(["generate", "--sglang-url", url, "--concurrency", str(concurrency), *common],
                           work / "worker.log"),
             harness.spawn(["sink", "--output", str(out), "--flush-seconds", "0.5", *common], work / "sink.log")]
    try:
        time.sleep(3)  # the consumers join their groups, as in a running deployment
        started = time.monotonic()
        producer = harness.spawn(["produce", str(source), "--tokenizer", str(TOKENIZER_DIR),
                                  "--partitions", "6", "--max-new-tokens",
                                  str(MAX_NEW_TOKENS), "--temperature", "0.6", "--top-p", "1.0",
                                  "--top-k", "-1", *common], work / "producer.log")
        while harness.dataset_rows(out) < prompts:
            if any(p.poll() not in (None, 0) for p in [*procs, producer]):
                raise RuntimeError(f"a pipeline process failed; logs in {work}")
            time.sleep(0.05)
        elapsed = time.monotonic() - started
        producer.wait(timeout=60)
        return elapsed
    finally:
        for proc in procs:
            harness.stop(proc)


def run(*, prompts: int, concurrency: int) -> dict[str, float]:
    """One side-by-side measurement on one vLLM server; returns the figures."""
    work = Path(tempfile.mkdtemp(prefix="eaglefeed-bench-"))
    source, prompts = write_prompts(work / "prompts.jsonl", prompts)
    with vllm(tiny_model(), work / "vllm.log") as url, harness.broker() as bootstrap:
        asyncio.run(direct(source, url, concurrency, work / "warmup.jsonl"))  # warm both caches alike
        t_direct = asyncio.run(direct(source, url, concurrency, work / "direct.jsonl"))
        t_pipe = pipeline(bootstrap, source, url, concurrency, work, prompts)
    shutil.rmtree(work)  # kept, with the logs, when a run fails
    return {"prompts": prompts, "direct_prompts_per_s": prompts / t_direct,
            "pipeline_prompts_per_s": prompts / t_pipe, "ratio": t_direct / t_pipe}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=64, help="in flight, pipeline and direct alike")
    args = parser.parse_args()
    print(json.dumps(run(prompts=args.prompts, concurrency=args.concurrency), indent=2))


if __name__ == "__main__":
    main()
