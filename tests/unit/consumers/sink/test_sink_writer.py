import threading

import pytest

from eaglefeed.consumers.sink.writer import SegmentWriter, WriteJob
from eaglefeed.dataset import manifest
from eaglefeed.schemas.columnar import GenerationBatch


def gen(i):
    return {
        "id": i, "prompt_id": "p", "sample_index": 0, "prompt_ids": [1], "output_ids": [2],
        "finish_reason": "stop", "matched_stop": None, "prompt_tokens": 1, "completion_tokens": 1,
        "cached_tokens": 0, "latency_seconds": 0.1, "endpoint": "e", "model_path": "m", "engine_version": "v",
        "worker_id": "w", "source": "s", "source_row": "0", "turn_index": 0, "sampling_params": "{}",
        "chat_template_kwargs": "{}", "tokenizer_id": "t", "tokenizer_hash": "h", "chat_template_hash": "c",
        "prompt_created_at": 1, "created_at": 2,
    }


def job(n, rows=0):
    batch = GenerationBatch.from_records([gen(f"r{n}-{k}") for k in range(rows)]) if rows else None
    return WriteJob(key=n % 2, event={"kind": "flush", "offsets": {f"g:{n % 2}": [n, n]}}, next_offset=n + 1,
                    name=f"s{n}.parquet" if rows else None, rows=batch)


def test_jobs_are_written_in_order_and_handed_back(tmp_path):
    writer = SegmentWriter(tmp_path, crash=lambda step: None)
    for n in range(6):
        writer.submit(job(n, rows=n % 3))
    writer.wait()
    done = writer.finished()
    writer.close()
    assert [j.next_offset for j in done] == [1, 2, 3, 4, 5, 6]
    events = manifest.read_manifest(tmp_path)
    assert [e["offsets"] for e in events] == [j.event["offsets"] for j in done]
    assert [len(e["added"]) for e in events] == [0, 1, 1, 0, 1, 1]
    assert all(j.rows is None for j in done)  # rows are freed once written


def test_a_failed_write_stops_everything_after_it(tmp_path):
    steps = []

    def crash(step):
        steps.append(step)
        if len(steps) == 3:
            raise OSError("disk full")

    writer = SegmentWriter(tmp_path, crash=crash, max_pending=1)
    writer.submit(job(0, rows=1))  # after_rename, after_manifest
    writer.submit(job(1, rows=1))  # after_rename raises: its event is never appended
    with pytest.raises(RuntimeError, match="disk full"):
        writer.wait()
    with pytest.raises(RuntimeError):
        writer.submit(job(2))
    assert len(manifest.read_manifest(tmp_path)) == 1


def test_submit_blocks_while_max_pending_jobs_wait(tmp_path):
    gate = threading.Event()
    writer = SegmentWriter(tmp_path, crash=lambda step: gate.wait(10) if step == "after_manifest" else None,
                           max_pending=1)
    writer.submit(job(0))  # being written, held at the gate
    writer.submit(job(1))  # waits in the queue
    third = threading.Thread(target=writer.submit, args=(job(2),))
    third.start()
    third.join(0.3)
    assert third.is_alive()  # blocked: backpressure on the sink's main thread
    gate.set()
    third.join(10)
    writer.close()
    assert [j.next_offset for j in writer.finished()] == [1, 2, 3]
