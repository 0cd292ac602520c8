"""Peak memory of a generate worker and a sink facing a backlog, at two backlog sizes.

A backlog of ``N`` prompts (or generations) waits in Kafka; a worker (stand-in with no latency)
or a sink then runs for ``--seconds`` on it while its resident memory is sampled. Memory that
stays bounded shows as the same peak for both backlog sizes. Target: under 500 MB each.

    python -m bench.memory --backlogs 20000 100000 --seconds 20
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kafka import KafkaProducer

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import peak_rss_mb  # noqa: E402
from worker_common import broker, fresh_topics, standin, worker_cmd  # noqa: E402

from eaglefeed.schemas import GENERATION  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backlogs", type=int, nargs="+", default=[20000, 100000])
    parser.add_argument("--seconds", type=float, default=20.0, help="how long each process runs on the backlog")
    args = parser.parse_args()
    results = {}
    with broker(None) as bootstrap, standin("--latency-model", "none", "--output-len-mean", "200") as url:
        for backlog in args.backlogs:
            kafka = fresh_topics(bootstrap, backlog, max_new_tokens=512)
            worker = subprocess.Popen(worker_cmd(kafka, url), stdout=subprocess.DEVNULL)
            results[f"worker_peak_rss_mb_{backlog}"] = _run_for(worker, args.seconds)
            _fill_generations(bootstrap, kafka.generations_topic, backlog)
            with tempfile.TemporaryDirectory() as out:
                sink = subprocess.Popen([sys.executable, "-m", "eaglefeed", "--log-level", "warning", "sink",
                                         "--output", out, "--bootstrap-servers", bootstrap,
                                         "--topic-prefix", kafka.topic_prefix,
                                         "--group-id", f"{kafka.topic_prefix}-sink"], stdout=subprocess.DEVNULL)
                results[f"sink_peak_rss_mb_{backlog}"] = _run_for(sink, args.seconds)
            print(f"backlog {backlog}: worker peak {results[f'worker_peak_rss_mb_{backlog}']:.0f} MB, "
                  f"sink peak {results[f'sink_peak_rss_mb_{backlog}']:.0f} MB", flush=True)
    print("RESULT " + json.dumps(results))


def _run_for(proc: subprocess.Popen[bytes], seconds: float) -> float:
    """Let ``proc`` work for ``seconds``, then stop it; return its peak RSS in MB."""
    deadline = time.monotonic() + seconds
    peak = 0.0
    while time.monotonic() < deadline and proc.poll() is None:
        peak = max(peak, peak_rss_mb(proc.pid))
        time.sleep(0.5)
    if proc.poll() is None:
        peak = max(peak, peak_rss_mb(proc.pid))
        proc.terminate()
    proc.wait(timeout=120)
    return peak


def _fill_generations(bootstrap: str, topic: str, count: int) -> None:
    """``count`` GenerationRecords of 300 prompt + ~200 output tokens, some ids repeated."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, compression_type="zstd",
                             batch_size=512 * 1024)
    rng = random.Random(7)
    prompt_ids = [rng.randrange(9, 4096) for _ in range(300)]
    for i in range(count):
        out = [rng.randrange(9, 4096) for _ in range(rng.randrange(100, 300))] + [2]
        record = {
            "id": f"m{i}:0", "prompt_id": f"m{i}", "sample_index": 0, "prompt_ids": prompt_ids,
            "output_ids": out, "finish_reason": "stop", "matched_stop": 2, "prompt_tokens": 300,
            "completion_tokens": len(out), "cached_tokens": 0, "latency_seconds": 0.1, "endpoint": "e",
            "model_path": "m", "engine_version": "v", "worker_id": "w", "source": "s", "source_row": str(i),
            "turn_index": 0, "sampling_params": "{}", "chat_template_kwargs": "{}", "tokenizer_id": "t",
            "tokenizer_hash": "h", "chat_template_hash": "c", "prompt_created_at": 1, "created_at": 2,
        }
        producer.send(topic, key=record["id"].encode(), value=GENERATION.encode(record))
    producer.flush()
    producer.close()


if __name__ == "__main__":
    main()
