"""The direct script of ``bench/vllm_pipeline_vs_direct.py``, run as its own process like a user's script.

Tokenize every prompt with the chat template, then one asyncio loop (aiohttp and a semaphore)
sends the ids to vLLM's token route ``/inference/v1/generate`` and appends JSONL. Its own process,
so its time to the first row pays for Python's start, imports and the tokenizer load, as the
pipeline's producer does. Writes a JSON report: each row's completion time and each request's latency.

    python -m bench.vllm_direct PROMPTS.jsonl URL CONCURRENCY OUT.jsonl REPORT.json [--limit N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.pipeline_vs_direct import render_ids
from eaglefeed.devtools.demo import TOKENIZER_DIR

MAX_NEW_TOKENS = 32
SAMPLING = {"max_tokens": MAX_NEW_TOKENS, "temperature": 0.6, "top_p": 1.0, "top_k": -1, "min_p": 0.0}


def render(rows: list[dict[str, Any]]) -> list[list[int]]:
    """The chat-template token ids of each row's prompt, as the direct script computes them."""
    from transformers import AutoTokenizer

    return render_ids(AutoTokenizer.from_pretrained(str(TOKENIZER_DIR)), rows)


def worker_params(i: int) -> dict[str, Any]:
    """What ``eaglefeed generate`` sends vLLM for the same sampling: the neutral settings too, a 63-bit seed."""
    from eaglefeed.chat.seeds import sample_seed
    from eaglefeed.consumers.generate.inference import NEUTRAL, vllm_sampling_params

    ours = {**NEUTRAL, "max_new_tokens": MAX_NEW_TOKENS, "temperature": SAMPLING["temperature"],
            "top_p": SAMPLING["top_p"], "top_k": SAMPLING["top_k"], "min_p": SAMPLING["min_p"],
            "sampling_seed": sample_seed(f"d{i}", 0, 0)}
    return vllm_sampling_params(ours)


async def direct(source: Path, url: str, concurrency: int, out: Path, limit: int | None = None,
                 same_params: bool = False) -> dict[str, Any]:
    """Every prompt of ``source`` through vLLM; each row's completion time and each request's latency.

    ``same_params``: send the worker's sampling params (:func:`worker_params`) instead of the four set here.
    """
    jobs = render([json.loads(line) for line in source.read_text().splitlines()][:limit])
    sem = asyncio.Semaphore(concurrency)
    stamps: list[float] = []
    latencies: list[float] = []
    with open(out, "w") as fh:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as http:
            async def one(i: int, ids: list[int]) -> None:
                async with sem:
                    params = worker_params(i) if same_params else {**SAMPLING, "seed": i}
                    body = {"request_id": f"d{i}", "token_ids": ids, "sampling_params": params}
                    sent = time.perf_counter()
                    async with http.post(f"{url}/inference/v1/generate", json=body) as resp:
                        data = await resp.json()
                    latencies.append(time.perf_counter() - sent)
                if "choices" not in data:
                    raise RuntimeError(f"vLLM refused prompt {i}: {data}")
                fh.write(json.dumps({"input_ids": ids, "output_ids": data["choices"][0]["token_ids"]}) + "\n")
                stamps.append(time.time())

            await asyncio.gather(*(one(i, ids) for i, ids in enumerate(jobs)))
    return {"stamps": stamps, "latencies": latencies}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path)
    parser.add_argument("url")
    parser.add_argument("concurrency", type=int)
    parser.add_argument("out", type=Path)
    parser.add_argument("report", type=Path)
    parser.add_argument("--limit", type=int)
    parser.add_argument("--same-params", action="store_true", help="send the worker's sampling params")
    args = parser.parse_args()
    result = asyncio.run(direct(args.source, args.url, args.concurrency, args.out, args.limit, args.same_params))
    args.report.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
