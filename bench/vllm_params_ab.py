"""The direct script's four sampling settings against the worker's full set, interleaved on one vLLM.

``bench/vllm_pipeline_vs_direct.py --same-params`` (runs F; the default baseline since) ran the direct pass with the worker's sampling
params (every neutral setting, a 63-bit seed) once, after all the others, so machine drift between
passes falls on it alone. This runs only direct passes (``bench.vllm_direct``, 3,000 prompts,
64 in flight, cores split as there) in the order plain, worker, plain, worker, worker, plain, so
that a drift in time weighs on both kinds alike, and reports for each what vLLM did with its core
(its worker's tokens per CPU-second, its API server's CPU per request, inter-token latency).

    python -m bench.vllm_params_ab
"""

from __future__ import annotations

import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from bench import vllm_pipeline_vs_direct as vb
from bench import vllm_probe

ORDER = (False, True, False, True, True, False)  # same_params per pass: ABAB BA, each kind 3 times


def summary(r: dict[str, Any]) -> dict[str, Any]:
    """The figures of one direct pass that tell the two kinds of request apart."""
    worker, api = r.get("cpu_share_VLLM::Worker") or 0.0, r.get("cpu_share_python", 0.0)
    return {"steady": r["steady_rows_per_s"], "p50": r["latency_s"]["p50"], "api_share": round(api, 3),
            "worker_share": round(worker, 3),
            "tokens_per_worker_cpu_s": round(r["vllm_generation_tokens_per_s"] / worker) if worker else None,
            "api_ms_per_req": round(1000 * api / r["vllm_requests_per_s"], 2) if r["vllm_requests_per_s"] else None,
            "itl_ms": round(1000 * r["vllm_inter_token_mean_s"], 1),
            "other_cpu1": r.get("cpu_share_other_cpu1"), "cpu0_busy": r.get("cpu0_busy")}


def main() -> None:
    core = vb.split_cores()  # before vLLM and the direct script start: they inherit it
    work = Path(tempfile.mkdtemp(prefix="ab-params-"))
    source, _ = vb.write_prompts(work / "prompts.jsonl", 3000)
    out: dict[str, dict[str, Any]] = {}
    with vb.vllm(vb.tiny_model(), work / "vllm.log", core) as (url, session), \
            vllm_probe.Sampler(url, session) as sampler:
        vb.direct(source, url, 64, work, "warmup", None, limit=vb.WARMUP)
        for i, same in enumerate(ORDER):
            name = f"{i}-{'worker' if same else 'plain'}"
            out[name] = summary(vb.direct(source, url, 64, work, name, sampler, same_params=same))
            print(name, json.dumps(out[name]), flush=True)
    for kind in ("plain", "worker"):
        rates = [v["steady"] for k, v in out.items() if k.endswith(kind)]
        print(f"{kind}: steady rows/s {rates}, mean {statistics.fmean(rates):.1f}")
    print("AB " + json.dumps(out))


if __name__ == "__main__":
    main()
