"""Pipeline vs the direct-script baseline, on the same prompts, stand-ins and concurrency.

(a) direct: what a careful user writes today — tokenize every prompt with the chat template,
    then one asyncio loop with aiohttp and a semaphore sends them round-robin to the servers
    and appends JSONL;
(b) pipeline: ``eaglefeed produce`` → Kafka → ``eaglefeed generate`` worker(s) → ``eaglefeed sink``.
Both run against SGLang stand-ins with the continuous-batching latency model. Reported: prompts/s
of each, the ratio (b)/(a), and the stand-ins' busy fraction (time-averaged running requests over
the maximum) during each run.

    python -m bench.pipeline_vs_direct --prompts 2000 --servers 1 --workers 1
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

import aiohttp

from bench import harness
from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.kafka import ensure_topics, pipeline_topics
from eaglefeed.devtools.demo import TOKENIZER_DIR

STANDIN = ["--max-running-requests", "64", "--decode-step-ms", "2", "--decode-step-ms-per-running", "0.02",
           "--output-len-mean", "150", "--length-fraction", "0.02"]
SAMPLING = {"max_new_tokens": 512, "temperature": 0.6, "top_p": 0.95, "top_k": 20, "min_p": 0.0}


def run(*, prompts: int, servers: int, workers: int, concurrency: int) -> dict[str, float]:
    """One side-by-side measurement; returns the figures."""
    with tempfile.TemporaryDirectory(prefix="eaglefeed-bench-") as tmp:
        work = Path(tmp)
        source = harness.write_prompts(work / "prompts.jsonl", prompts)
        with harness.standins(servers, *STANDIN) as urls, harness.broker() as bootstrap:
            before = [harness.busy_reading(u) for u in urls]
            t_direct = asyncio.run(_direct(source, urls, concurrency * workers, work / "direct.jsonl"))
            busy_direct = harness.busy_fraction(before, [harness.busy_reading(u) for u in urls])
            t_pipe, busy_pipe = _pipeline(bootstrap, source, urls, workers, concurrency, work, prompts)
    return {"direct_prompts_per_s": prompts / t_direct, "pipeline_prompts_per_s": prompts / t_pipe,
            "ratio": t_direct / t_pipe, "busy_direct": busy_direct, "busy_pipeline": busy_pipe}


def scaling(*, prompts: int, workers: int, concurrency: int) -> dict[str, float]:
    """Pipeline only: ``workers`` workers sharing as many stand-ins; prompts/s and busy fraction."""
    with tempfile.TemporaryDirectory(prefix="eaglefeed-bench-") as tmp:
        work = Path(tmp)
        source = harness.write_prompts(work / "prompts.jsonl", prompts)
        with harness.standins(workers, *STANDIN) as urls, harness.broker() as bootstrap:
            took, busy = _pipeline(bootstrap, source, urls, workers, concurrency, work, prompts)
    return {"prompts_per_s": prompts / took, "busy": busy}


def render_ids(tok, rows: list[dict]) -> list[list[int]]:
    """The chat-template token ids of each row's prompt, as a hand-written direct script computes them."""
    jobs = []
    for row in rows:
        messages = row.get("messages") or [
            {"role": {"human": "user", "gpt": "assistant"}.get(t["from"], t["from"]), "content": t["value"]}
            for t in row["conversations"]]
        while messages[-1]["role"] == "assistant":
            messages = messages[:-1]
        jobs.append(tok.apply_chat_template(messages, tools=row.get("tools"), add_generation_prompt=True,
                                            tokenize=True, return_dict=True,
                                            **row.get("chat_template_kwargs", {}))["input_ids"])
    return jobs


async def _direct(source: Path, urls: list[str], concurrency: int, out: Path) -> float:
    from transformers import AutoTokenizer

    started = time.monotonic()
    tok = AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))
    rows = [json.loads(line) for line in source.read_text().splitlines()]
    jobs = render_ids(tok, rows)
    sem = asyncio.Semaphore(concurrency)
    with open(out, "w") as fh:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as http:
            async def one(i: int, ids: list[int]) -> None:
                async with sem:
                    body = {"input_ids": ids, "sampling_params": {**SAMPLING, "sampling_seed": i}}
                    async with http.post(f"{urls[i % len(urls)]}/generate", json=body) as resp:
                        data = await resp.json()
                fh.write(json.dumps({"input_ids": ids, "output_ids": data["output_ids"]}) + "\n")

            await asyncio.gather(*(one(i, ids) for i, ids in enumerate(jobs)))
    return time.monotonic() - started


def _pipeline(bootstrap: str, source: Path, urls: list[str], workers: int, concurrency: int,
              work: Path, prompts: int) -> tuple[float, float]:
    common = ["--bootstrap-servers", bootstrap, "--topic-prefix", "bench"]
    partitions = max(6, 2 * workers)
    # A running deployment has its topics and a joined consumer group before prompts arrive.
    kafka = KafkaConfig(bootstrap_servers=bootstrap, topic_prefix="bench")
    ensure_topics(kafka, pipeline_topics(kafka, partitions))
    out = work / "dataset"
    procs = [harness.spawn(["generate", *[a for u in urls for a in ("--sglang-url", u)],
                            "--concurrency", str(concurrency), *common], log=work / f"worker{i}.log")
             for i in range(workers)]
    procs.append(harness.spawn(["sink", "--output", str(out), "--flush-seconds", "0.5", *common],
                               log=work / "sink.log"))
    try:
        time.sleep(3)  # let the consumers join their groups, as a running deployment has
        before = [harness.busy_reading(u) for u in urls]
        started = time.monotonic()
        producer = harness.spawn(["produce", str(source), "--tokenizer", str(TOKENIZER_DIR),
                                  "--partitions", str(partitions),
                                  "--max-new-tokens", str(SAMPLING["max_new_tokens"]), *common],
                                 log=work / "producer.log")
        trace, next_trace = [], started
        while (rows := harness.dataset_rows(out)) < prompts:
            if time.monotonic() >= next_trace:
                trace.append((round(time.monotonic() - started, 1), rows))
                next_trace += 2.0
            if any(p.poll() not in (None, 0) for p in [*procs, producer]):
                raise RuntimeError(f"a pipeline process failed; logs in {work}")
            time.sleep(0.05)
        elapsed = time.monotonic() - started
        busy = harness.busy_fraction(before, [harness.busy_reading(u) for u in urls])
        cpu = {f"cpu_{i}": harness.cpu_seconds(p.pid) for i, p in enumerate(procs)}
        print(f"pipeline CPU seconds (workers..., sink): {cpu}; rows over time: {trace}", flush=True)
        producer.wait(timeout=60)
        return elapsed, busy
    finally:
        for proc in procs:
            harness.stop(proc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=2000)
    parser.add_argument("--servers", type=int, default=1)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=128, help="in flight per worker (and per baseline)")
    parser.add_argument("--no-pin", action="store_true", help="do not give the stand-ins a core of their own")
    args = parser.parse_args()
    if not args.no_pin:
        harness.SERVER_CORES, _ = harness.pin_cores()
    figures = run(prompts=args.prompts, servers=args.servers, workers=args.workers,
                  concurrency=args.concurrency)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
