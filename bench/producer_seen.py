"""Memory and speed of the producer's in-run duplicate set under ``--follow`` (a run that never ends).

Not a test. Two parts:

* ``set``: ``eaglefeed.producers.publisher.RecentIds`` alone, at the producer's limit (``SEEN_LIMIT``,
  1,000,000 ids), fed ``--rounds`` times the limit of distinct 128-bit prompt ids: traced memory
  and microseconds per add at each multiple of the limit (it must stay flat once full);
* ``follow``: a real ``eaglefeed produce --follow`` on a file that keeps growing (``--lines``
  distinct short prompts appended over the run) against a local broker; its resident memory is
  sampled every second, with the number of prompts published so far.

    .venv/bin/python -m bench.producer_seen [--rounds 3] [--lines 100000] [--skip-follow]
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import write_prompts  # noqa: E402
from worker_common import broker  # noqa: E402

from eaglefeed.core.config import KafkaConfig  # noqa: E402
from eaglefeed.devtools.demo import TOKENIZER_DIR  # noqa: E402
from eaglefeed.producers.publisher import SEEN_LIMIT, RecentIds  # noqa: E402


def measure_set(limit: int, rounds: int) -> list[dict[str, float]]:
    """Traced MB and µs per add after each ``limit`` adds of fresh ids."""
    rng = random.Random(0)
    tracemalloc.start()
    ids = RecentIds(limit)
    out = []
    for r in range(1, rounds + 1):
        started = time.perf_counter()
        for _ in range(limit):
            ids.add(rng.getrandbits(128))
        took = time.perf_counter() - started
        current, peak = tracemalloc.get_traced_memory()
        out.append({"ids_added": r * limit, "held": len(ids), "traced_mb": current / 1e6,
                    "peak_mb": peak / 1e6, "us_per_add": took / limit * 1e6})
        print(f"set: {r * limit:>9,} ids added, {len(ids):,} held: {current / 1e6:6.1f} MB "
              f"(peak {peak / 1e6:6.1f} MB), {took / limit * 1e6:5.2f} µs per add", flush=True)
    tracemalloc.stop()
    return out


def measure_follow(lines: int, seconds: float) -> list[dict[str, Any]]:
    """RSS of ``produce --follow`` while ``lines`` prompts are appended over ``seconds``."""
    samples: list[dict[str, Any]] = []
    with broker(None) as bootstrap, tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        source = write_prompts(work / "all.jsonl", lines).read_text().splitlines(keepends=True)
        inbox = work / "inbox.jsonl"
        inbox.touch()
        kafka = KafkaConfig(bootstrap_servers=bootstrap, topic_prefix=f"seen{int(time.time())}")
        proc = subprocess.Popen(
            [sys.executable, "-m", "eaglefeed", "--log-level", "warning", "produce", str(inbox), "--follow",
             "--tokenizer", str(TOKENIZER_DIR), "--workers", "0", "--poll-interval", "0.2",
             "--state-dir", str(work / "state"), "--bootstrap-servers", bootstrap,
             "--topic-prefix", kafka.topic_prefix],
            stdout=subprocess.DEVNULL)
        try:
            started = time.monotonic()
            written = 0
            while proc.poll() is None:
                elapsed = time.monotonic() - started
                due = min(lines, int(lines * elapsed / seconds))
                if due > written:
                    with open(inbox, "a", encoding="utf-8") as fh:
                        fh.writelines(source[written:due])
                    written = due
                samples.append({"t": round(elapsed, 1), "appended": written, "rss_mb": _rss_mb(proc.pid)})
                if written >= lines and elapsed > seconds + 10:
                    break
                time.sleep(1.0)
        finally:
            proc.terminate()
            proc.wait(timeout=60)
    for s in samples[:: max(1, len(samples) // 12)] + samples[-1:]:
        print(f"follow: {s['t']:>6.1f} s, {s['appended']:>8,} lines appended, RSS {s['rss_mb']:.0f} MB", flush=True)
    return samples


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=SEEN_LIMIT)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=60.0, help="over how long the lines are appended")
    parser.add_argument("--skip-follow", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict[str, Any] = {"set": measure_set(args.limit, args.rounds)}
    if not args.skip_follow:
        results["follow"] = measure_follow(args.lines, args.seconds)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
