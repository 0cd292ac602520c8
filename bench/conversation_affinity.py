"""Conversation affinity: how much of a regenerated turn's prompt the servers' prefix caches serve.

Four SGLang stand-ins (each with its own prefix cache: ``eaglefeed.devtools.standin.prefix_cache``),
a fresh local broker, two generate workers in one group, the converse stage and a sink run
``--conversations`` 3-turn conversations (``--history tokens``) twice on the same servers, their
caches flushed in between: once with every request sent to the least-outstanding server
(``--affinity-load 0``, the routing before issue 25) and once with conversation affinity (the
default). For each run it reports, per turn, the share of prompt tokens the server's cache served
(``cached_tokens`` in the rows), the total prefill tokens (prompt − cached), how many turns ≥ 1 ran
on the server of the turn before, and the dataset checks of the other benchmarks: every lane's
turns once, no id twice, as many rows as the conversations topic counts turns.

    python -m bench.conversation_affinity --conversations 200
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq

from bench import harness
from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.kafka import ensure_topics, pipeline_topics
from eaglefeed.dataset.manifest import live_segments, read_manifest
from eaglefeed.dataset.stats import compute_stats
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.ops.conversation_status import ConversationFeed

TURNS = 3
PARTITIONS = 6
STANDIN_FLAGS = ("--tool-call-fraction", "0", "--length-fraction", "0", "--output-len-mean", "200",
                 "--output-len-sigma", "0.5", "--decode-step-ms", "2", "--decode-step-ms-per-running", "0.02")
TOPICS = ("travel", "cooking", "chess", "gardening", "databases", "music", "astronomy", "running")


def row(i: int) -> dict[str, Any]:
    """A conversation of three user turns (the source's answers are regenerated); texts vary with ``i``."""
    topic = TOPICS[i % len(TOPICS)]
    return {"id": f"conv-{i}", "messages": [
        {"role": "system", "content": f"You are assistant {i}, an expert on {topic}. Be concrete."},
        {"role": "user", "content": f"Give me three tips about {topic} for a beginner (case {i})."},
        {"role": "assistant", "content": "Here are three tips."},
        {"role": "user", "content": "Explain the second one in more detail."},
        {"role": "assistant", "content": "Sure."},
        {"role": "user", "content": "And what mistake do beginners make most often?"},
        {"role": "assistant", "content": "Usually this one."}]}


def run(*, conversations: int, workers: int, concurrency: int | str, cache_tokens: int,
        history: str = "tokens", prefill_ms: float = 0.02) -> dict[str, float]:
    """Both routings on the same four stand-ins; returns the figures of each (``least_*``, ``affinity_*``)."""
    flags = [*STANDIN_FLAGS, "--prefill-ms-per-token", str(prefill_ms),
             *(("--prefix-cache-tokens", str(cache_tokens)) if cache_tokens else ())]
    figures: dict[str, float] = {}
    with harness.broker() as bootstrap, harness.standins(4, *flags) as urls, \
            tempfile.TemporaryDirectory(prefix="eaglefeed-affinity-") as tmp:
        source = Path(tmp) / "conversations.jsonl"
        source.write_text("".join(json.dumps(row(i)) + "\n" for i in range(conversations)))
        for name, load in (("least", "0"), ("affinity", "1.25")):
            for url in urls:  # every run starts from cold caches
                httpx.post(f"{url}/flush_cache", timeout=10).raise_for_status()
            work = Path(tmp) / name
            work.mkdir()
            result = _pipeline(bootstrap, source, urls, work, conversations=conversations, workers=workers,
                               concurrency=concurrency, affinity_load=load, history=history)
            figures.update({f"{name}_{k}": v for k, v in result.items()})
            _print(name, result)
    for turn in range(TURNS):
        print(f"turn {turn}: cached share {figures[f'least_cached_turn{turn}']:.1%} least-outstanding, "
              f"{figures[f'affinity_cached_turn{turn}']:.1%} affinity")
    saved = 1 - figures["affinity_prefill_tokens"] / figures["least_prefill_tokens"]
    print(f"prefill tokens: {figures['least_prefill_tokens']:.0f} least-outstanding, "
          f"{figures['affinity_prefill_tokens']:.0f} affinity ({saved:.1%} fewer)")
    figures["affinity_prefill_saved"] = saved
    return figures


def _pipeline(bootstrap: str, source: Path, urls: list[str], work: Path, *, conversations: int, workers: int,
              concurrency: int | str, affinity_load: str, history: str) -> dict[str, float]:
    kafka = KafkaConfig(bootstrap_servers=bootstrap, topic_prefix=f"aff{uuid.uuid4().hex[:8]}")
    common = ["--bootstrap-servers", bootstrap, "--topic-prefix", kafka.topic_prefix]
    ensure_topics(kafka, pipeline_topics(kafka, PARTITIONS))
    out = work / "dataset"
    servers = [a for u in urls for a in ("--sglang-url", u)]
    procs = [harness.spawn(["generate", *servers, "--concurrency", str(concurrency), "--affinity-load",
                            affinity_load, *common], log=work / f"worker{i}.log") for i in range(workers)]
    procs.append(harness.spawn(["converse", *common], log=work / "converse.log"))
    procs.append(harness.spawn(["sink", "--output", str(out), "--flush-seconds", "0.5", *common],
                               log=work / "sink.log"))
    try:
        time.sleep(3)  # let the consumers join their groups, as a running deployment has
        started = time.monotonic()
        producer = harness.spawn(["produce", str(source), "--tokenizer", str(TOKENIZER_DIR),
                                  "--history", history, "--max-turns", str(TURNS),
                                  "--partitions", str(PARTITIONS), "--max-new-tokens", "1024", *common],
                                 log=work / "producer.log")
        turns_done = _wait_ended(kafka, conversations, [*procs, producer], work)
        while harness.dataset_rows(out) < turns_done:
            if any(p.poll() not in (None, 0) for p in procs):
                raise RuntimeError(f"a pipeline process failed; logs in {work}")
            time.sleep(0.1)
        elapsed = time.monotonic() - started
        producer.wait(timeout=60)
    finally:
        for proc in procs:
            harness.stop(proc)
    result = _measure(out, turns_done)
    result["seconds"] = elapsed
    return result


def _wait_ended(kafka: KafkaConfig, conversations: int, procs: list[Any], work: Path,
                timeout: float = 900.0) -> int:
    """Wait until every conversation's lanes ended; return the turns the conversations topic counts."""
    feed = ConversationFeed(kafka=kafka)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            view = feed.read()
            if view is not None and view.conversations >= conversations and view.in_progress == 0:
                if view.ended.get("complete", 0) != view.lanes:
                    print(f"  not every lane completed: {view.lines()}")
                return view.turns_done
            if any(p.poll() not in (None, 0) for p in procs):
                raise RuntimeError(f"a pipeline process failed; logs in {work}")
            time.sleep(0.5)
        raise TimeoutError(f"conversations did not end; logs in {work}")
    finally:
        feed.close()


def _measure(out: Path, turns_done: int) -> dict[str, float]:
    """Cache share per turn, prefill tokens, same-server share, and the dataset checks."""
    columns = ["id", "conversation_id", "lane", "turn_index", "endpoint", "prompt_len", "cached_tokens"]
    files = [out / p for p in live_segments(read_manifest(out))]
    rows = [r for f in files for r in pq.read_table(f, columns=columns).to_pylist()]
    ids = [r["id"] for r in rows]
    lanes: dict[tuple[str, int], dict[int, dict[str, Any]]] = defaultdict(dict)
    for r in rows:
        turns = lanes[(r["conversation_id"], r["lane"])]
        if r["turn_index"] in turns:
            raise AssertionError(f"turn {r['turn_index']} of {r['conversation_id']} lane {r['lane']} twice")
        turns[r["turn_index"]] = r
    if len(set(ids)) != len(ids) or len(rows) != turns_done:
        raise AssertionError(f"{len(rows)} rows, {len(set(ids))} ids, {turns_done} turns counted")
    if any(sorted(t) != list(range(len(t))) for t in lanes.values()):
        raise AssertionError("a lane has a gap in its turns")
    stats = compute_stats(out)  # what `eaglefeed stats` sums must agree with the rows
    assert stats.cached_tokens == sum(r["cached_tokens"] for r in rows)
    result: dict[str, float] = {"rows": len(rows), "prefill_tokens": stats.prompt_tokens - stats.cached_tokens,
                                "prompt_tokens": stats.prompt_tokens}
    for turn, (_, prompt, cached) in stats.by_turn.items():
        result[f"cached_turn{turn}"] = cached / max(prompt, 1)
    later = [(r, lane[k - 1]) for lane in lanes.values() for k, r in lane.items() if k > 0]
    result["same_server"] = sum(a["endpoint"] == b["endpoint"] for a, b in later) / max(len(later), 1)
    later_prompt = sum(a["prompt_len"] for a, _ in later)
    result["cached_later_turns"] = sum(a["cached_tokens"] for a, _ in later) / max(later_prompt, 1)
    return result


def _print(name: str, result: dict[str, float]) -> None:
    shares = ", ".join(f"turn {t} {result.get(f'cached_turn{t}', 0):.1%}" for t in range(TURNS))
    print(f"{name}: {result['rows']:.0f} rows in {result['seconds']:.1f} s; cached share {shares}; turns >= 1 "
          f"{result['cached_later_turns']:.1%} cached, {result['same_server']:.1%} on the previous turn's "
          f"server; prefill tokens {result['prefill_tokens']:.0f} of {result['prompt_tokens']:.0f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--workers", type=int, default=2, help="generate workers in the one group")
    parser.add_argument("--concurrency", default="128", help="in flight per worker, or 'auto'")
    parser.add_argument("--cache-tokens", type=int, default=0,
                        help="each stand-in's prefix-cache capacity (0: its default, the KV pool)")
    parser.add_argument("--history", choices=("tokens", "rerender"), default="tokens",
                        help="how the converse stage builds the next prompt (docs/CONVERSATIONS.md)")
    parser.add_argument("--prefill-ms-per-token", type=float, default=0.02,
                        help="the stand-ins' cost per uncached prompt token (the stand-in's default)")
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()
    harness.SERVER_CORES, _ = harness.pin_cores()
    figures = run(conversations=args.conversations, workers=args.workers, concurrency=args.concurrency,
                  cache_tokens=args.cache_tokens, history=args.history, prefill_ms=args.prefill_ms_per_token)
    print("RESULT " + json.dumps({f"aff_{k}": v for k, v in figures.items()}), flush=True)  # for run_all
    if args.json_out:
        args.json_out.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
