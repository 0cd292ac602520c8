"""Sink write throughput for ~2000-token GenerationRecords: encoded messages in, committed Parquet out.

Not a test. Compares, in one run and on the same records:
  baseline  the codec's decode (Python int lists) + a per-row ``pa.array(list_of_lists)`` table +
            ``pq.write_table`` with pyarrow's defaults (zstd), fsync;
  sink      the sink's flush path: columnar decode, validation, id dedup, table build, segment
            write (temp file, fsync, sha256, rename) and the manifest append; on messages
            written as GenerationRecord v2 (ids packed as int32 bytes) and, as the same-run
            reference, as v1 (Avro int arrays).
With ``--bootstrap-servers`` it also times the whole ``run_sink`` against a real broker, v2 and v1.

    .venv/bin/python -m bench.sink_write [--rows 6000] [--segment-rows 2000] [--kafka | --bootstrap-servers H:P]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections import namedtuple
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from kafka.structs import TopicPartition
from prometheus_client import CollectorRegistry

from eaglefeed.consumers.sink.buffers import Buffers
from eaglefeed.consumers.sink.checkpoint import SinkCheckpoint
from eaglefeed.consumers.sink.segments import SegmentBuilder, SinkIds
from eaglefeed.core.config import KafkaConfig, SinkConfig
from eaglefeed.core.metrics import SinkMetrics
from eaglefeed.dataset import freq, manifest, shards
from eaglefeed.dataset.ids import IdIndex
from eaglefeed.dataset.markers import FlagMarkers
from eaglefeed.schemas import GENERATION, AvroCodec, codec_for
from eaglefeed.schemas.columnar import decode_generations
from eaglefeed.schemas.validity import invalid_rows

_Record = namedtuple("_Record", "topic partition offset key value")


def make_messages(rows: int, seed: int = 0, codec: AvroCodec = GENERATION) -> list[bytes]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(rows):
        prompt = rng.integers(0, 151_000, int(rng.integers(300, 700))).tolist()
        output = rng.integers(0, 151_000, 2000 - len(prompt)).tolist()
        out.append(codec.encode({
            "id": f"{i:032x}:0", "prompt_id": f"{i:032x}", "sample_index": 0, "prompt_ids": prompt,
            "output_ids": output, "finish_reason": "stop", "matched_stop": 151645,
            "prompt_tokens": len(prompt),
            "completion_tokens": len(output), "cached_tokens": 0, "latency_seconds": 12.5,
            "endpoint": "http://gpu-0:30000", "model_path": "Qwen/Qwen3-8B", "engine_version": "0.5.4",
            "engine": "sglang",
            "worker_id": "host-1", "source": "bench.jsonl", "source_row": str(i), "turn_index": 0,
            "sampling_params": '{"max_new_tokens": 2048, "sampling_seed": %d, "temperature": 0.6}' % i,
            "chat_template_kwargs": "{}", "tokenizer_id": "Qwen/Qwen3-8B", "tokenizer_hash": "ab" * 32,
            "chat_template_hash": "cd" * 32, "prompt_created_at": 1, "created_at": 2}))
    return out


def baseline(messages: list[bytes], root: Path, segment_rows: int) -> float:
    started = time.perf_counter()
    for n in range(0, len(messages), segment_rows):
        recs = [GENERATION.decode(m) for m in messages[n:n + segment_rows]]
        table = pa.table({
            "id": pa.array([r["id"] for r in recs]),
            "input_ids": pa.array([r["prompt_ids"] + r["output_ids"] for r in recs], pa.list_(pa.int32())),
            "loss_mask": pa.array([[0] * len(r["prompt_ids"]) + [1] * len(r["output_ids"]) for r in recs],
                                  pa.list_(pa.int8())),
            **{k: pa.array([r[k] for r in recs]) for k in ("finish_reason", "model_path", "sampling_params",
                                                            "tokenizer_hash", "completion_tokens")},
        })
        path = root / f"naive-{n}.parquet"
        pq.write_table(table, path, compression="zstd")
        with open(path, "rb+") as fh:
            os.fsync(fh.fileno())
    return time.perf_counter() - started


def sink_pipeline(messages: list[bytes], root: Path, segment_rows: int) -> float:
    """The sink's own flush path (buffers, segments, checkpoint): decode here, write on the writer's thread."""
    cfg = SinkConfig(kafka=KafkaConfig(topic_prefix="bench"), output=root, flush_rows=segment_rows,
                     flush_seconds=3600)
    metrics = SinkMetrics.create(CollectorRegistry())
    buffers = Buffers(cfg=cfg, metrics=metrics)
    # Every message is valid: no dead letter is sent, so no producer is needed (nor a consumer below).
    ids = SinkIds(root=root, metrics=metrics)
    segments = SegmentBuilder(ids=ids, producer=None, dead_letter_topic=cfg.kafka.dead_letter_topic,
                              metrics=metrics, crash=lambda step: None)
    checkpoint = SinkCheckpoint(root=root, consumer=None, buffers=buffers, segments=segments, ids=ids,
                                metrics=metrics, crash=lambda step: None)
    tp = TopicPartition("bench.generations", 0)
    checkpoint.assigned([tp])
    ids.sync()  # read the (empty) id index before the clock starts
    records = [_Record("bench.generations", 0, n, None, m) for n, m in enumerate(messages)]
    started = time.perf_counter()
    for n in range(0, len(records), 500):  # as poll() hands them over
        buffers.add(tp, records[n:n + 500])
        for due, batch in buffers.take_due(time.monotonic()):
            checkpoint.write(due, batch)
        checkpoint.commit()
    for due, batch in buffers.take_due(time.monotonic(), force=True):
        checkpoint.write(due, batch)
    checkpoint.drain()
    took = time.perf_counter() - started
    checkpoint.close()
    assert checkpoint.summary.rows_written == len(messages)
    return took


def sink_steps(messages: list[bytes], root: Path, segment_rows: int) -> dict[str, float]:
    """The same steps one after another, timed apart (where the time goes)."""
    parts = dict.fromkeys(("decode", "validate+dedup", "table", "token counts", "write+fsync+sha", "manifest"),
                          0.0)
    index = IdIndex()
    markers = {"Qwen/Qwen3-8B": FlagMarkers(reasoning=(151667, 151668), tool_call=(151657,))}
    for n in range(0, len(messages), segment_rows):
        t0 = time.perf_counter()
        decoded = decode_generations(messages[n:n + segment_rows])
        t1 = time.perf_counter()
        bad = {r for r, _ in invalid_rows(decoded.batch)}
        fresh = index.claim([r["id"] for r in decoded.batch.rows])
        batch = decoded.batch.select([r for r, new in enumerate(fresh) if new and r not in bad])
        t2 = time.perf_counter()
        table = shards.batch_to_table(batch, markers)
        t3 = time.perf_counter()
        name = shards.segment_name("bench", 0, n, n + segment_rows - 1)
        sidecar = freq.write_sidecar(root, name, freq.count_batch(batch))
        t3b = time.perf_counter()
        entry = shards.write_segment(root, name, table) | {"freq": sidecar}
        t4 = time.perf_counter()
        manifest.append_manifest(root, {"kind": "flush", "added": [entry], "offsets": {"bench:0": [n, n]}})
        t5 = time.perf_counter()
        for key, a, b in (("decode", t0, t1), ("validate+dedup", t1, t2), ("table", t2, t3),
                          ("token counts", t3, t3b), ("write+fsync+sha", t3b, t4), ("manifest", t4, t5)):
            parts[key] += b - a
    return parts


def through_kafka(messages: list[bytes], bootstrap: str, root: Path) -> tuple[float, float]:
    """Seconds for a bare consumer to read every message, and for ``run_sink`` to commit them all."""
    from eaglefeed.consumers.sink import run_sink
    from eaglefeed.core.config import KafkaConfig, SinkConfig
    from eaglefeed.core.kafka import ensure_topics, make_consumer, make_producer
    from eaglefeed.core.lifecycle import StopSignal

    kafka = KafkaConfig(bootstrap_servers=bootstrap, topic_prefix=f"bench{uuid.uuid4().hex[:8]}")
    ensure_topics(kafka, {kafka.generations_topic: 6, kafka.dead_letter_topic: 1})
    producer = make_producer(kafka)
    for n, m in enumerate(messages):
        producer.send(kafka.generations_topic, key=f"{n:032x}:0".encode(), value=m)
    producer.flush()
    producer.close()
    consumer = make_consumer(kafka, f"bench-read-{uuid.uuid4().hex[:6]}", max_poll_records=500)
    consumer.subscribe([kafka.generations_topic])
    got, started = 0, time.perf_counter()
    while got < len(messages):
        got += sum(len(records) for records in consumer.poll(timeout_ms=200).values())
    read_only = time.perf_counter() - started
    consumer.close()
    stop = StopSignal()
    cfg = SinkConfig(kafka=kafka, output=root, flush_rows=500, flush_seconds=1)
    started = time.perf_counter()
    thread = threading.Thread(target=run_sink, args=(cfg,), kwargs={"stop": stop})
    thread.start()
    while _rows(root) < len(messages):
        time.sleep(0.05)
    elapsed = time.perf_counter() - started
    stop.set()
    thread.join()
    return read_only, elapsed


def _rows(root: Path) -> int:
    return sum(s["rows"] for s in manifest.live_segments(manifest.read_manifest(root)).values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=6000)
    parser.add_argument("--segment-rows", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs per path")
    parser.add_argument("--bootstrap-servers", default=None, help="also time run_sink through this broker")
    parser.add_argument("--kafka", action="store_true", help="also time run_sink through a broker started here")
    args = parser.parse_args()
    if args.kafka and not args.bootstrap_servers:
        from bench.worker_common import broker
        with broker(None) as bootstrap:
            args.bootstrap_servers = bootstrap
            run(args)
    else:
        run(args)


def run(args: argparse.Namespace) -> None:
    """Every measurement of this benchmark, for ``args``."""
    messages = make_messages(args.rows)
    v1_messages = make_messages(args.rows, codec=codec_for("generation", 1))
    tokens = sum(len(GENERATION.decode(m)["output_ids"]) for m in messages[:50]) / 50
    print(f"{args.rows} records of 2000 tokens ({tokens:.0f} generated on average), "
          f"{sum(map(len, messages)) / len(messages):.0f} bytes each as Avro v2, "
          f"{sum(map(len, v1_messages)) / len(messages):.0f} as v1; {os.cpu_count()} CPUs")
    scratch = Path(tempfile.mkdtemp(prefix="eaglefeed-bench-"))
    try:
        best_base = best_sink = best_v1 = float("inf")
        for r in range(args.repeat):
            base_dir = scratch / f"base{r}"
            base_dir.mkdir()
            best_base = min(best_base, baseline(messages, base_dir, args.segment_rows))
            best_sink = min(best_sink, sink_pipeline(messages, scratch / f"sink{r}", args.segment_rows))
            best_v1 = min(best_v1, sink_pipeline(v1_messages, scratch / f"v1sink{r}", args.segment_rows))
        base_bytes = sum(p.stat().st_size for p in (scratch / "base0").iterdir())
        sink_bytes = sum(p.stat().st_size for p in (scratch / "sink0" / "segments").iterdir())
        print(f"baseline (codec decode + pa.array(list of lists) + write_table): "
              f"{args.rows / best_base:8.0f} rows/s  ({base_bytes / args.rows:.0f} B/row on disk)")
        print(f"sink flush path, v1 messages (varint arrays):                   "
              f"{args.rows / best_v1:8.0f} rows/s  = {best_base / best_v1:.1f}x baseline")
        print(f"sink flush path, v2 messages (packed int32):                    "
              f"{args.rows / best_sink:8.0f} rows/s  ({sink_bytes / args.rows:.0f} B/row on disk)  "
              f"= {best_base / best_sink:.1f}x baseline, {best_v1 / best_sink:.2f}x v1")
        print("RESULT " + json.dumps({"sink_rows_per_s": args.rows / best_sink,
                                      "sink_v1_rows_per_s": args.rows / best_v1,
                                      "sink_baseline_rows_per_s": args.rows / best_base}))
        for label, msgs in (("v2", messages), ("v1", v1_messages)):
            parts = sink_steps(msgs, scratch / f"steps-{label}", args.segment_rows)
            total = sum(parts.values())
            print(f"  {label}, the same steps one after another: {args.rows / total:.0f} rows/s; per row: "
                  + ", ".join(f"{k} {1e6 * v / args.rows:.0f} us ({100 * v / total:.0f}%)"
                              for k, v in parts.items()))
        if args.bootstrap_servers:
            figures = {}
            for label, msgs in (("v2", messages), ("v1", v1_messages)):
                read_only, took = through_kafka(msgs, args.bootstrap_servers, scratch / f"kafka-{label}")
                print(f"through Kafka (6 partitions), {label}: a bare kafka-python consumer reads "
                      f"{args.rows / read_only:.0f} rows/s; run_sink (flush 500 rows) commits "
                      f"{args.rows / took:.0f} rows/s")
                figures[label] = args.rows / took
            print("RESULT " + json.dumps({"sink_through_kafka_rows_per_s": figures["v2"],
                                          "sink_v1_through_kafka_rows_per_s": figures["v1"]}))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
