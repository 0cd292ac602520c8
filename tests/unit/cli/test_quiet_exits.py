"""How commands end: quietly on a closed pipe or a busy port, non-zero when interrupted."""

from __future__ import annotations

import random
import socket
import subprocess

from eaglefeed.cli.main import main
from eaglefeed.dataset import manifest, shards
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.schemas.columnar import GenerationBatch
from tests.cli import start_cli


def make_dataset(root, rows=600):
    rng = random.Random(0)
    recs = [{"id": f"r{i}", "prompt_id": f"p{i}", "sample_index": 0,
             "prompt_ids": [rng.randrange(151_000) for _ in range(30)],
             "output_ids": [rng.randrange(151_000) for _ in range(30)], "finish_reason": "stop",
             "matched_stop": None, "prompt_tokens": 30, "completion_tokens": 30, "cached_tokens": 0,
             "latency_seconds": 0.1, "endpoint": "e", "model_path": "m", "engine_version": "v",
             "worker_id": "w", "source": "s", "source_row": str(i), "turn_index": 0,
             "sampling_params": "{}", "chat_template_kwargs": "{}", "tokenizer_id": "t",
             "tokenizer_hash": "h", "chat_template_hash": "c", "prompt_created_at": 1, "created_at": 2}
            for i in range(rows)]
    table = shards.batch_to_table(GenerationBatch.from_records(recs))
    entry = shards.write_segment(root, "seg-0.parquet", table)
    manifest.append_manifest(root, {"kind": "flush", "added": [entry], "offsets": {"g:0": [0, 0]}})


def run_into_a_closed_pipe(*argv: str) -> subprocess.CompletedProcess[bytes]:
    """``eaglefeed ARGV | head -0``: the reader has gone before the first write."""
    proc = start_cli(*argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(argv, proc.returncode, b"", err)


def test_stats_and_export_into_a_closed_pipe_exit_without_a_traceback(tmp_path):
    make_dataset(tmp_path / "d")
    for argv in (["stats", str(tmp_path / "d")],
                 ["export", str(tmp_path / "d"), "--format", "specforge", "--out", "-"]):
        done = run_into_a_closed_pipe(*argv)
        assert b"Traceback" not in done.stderr and b"BrokenPipe" not in done.stderr, done.stderr.decode()
        assert done.returncode == 141, argv  # 128 + SIGPIPE, as a Unix tool killed by it


def test_the_stand_in_on_a_busy_port_says_so_in_one_line(capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code = main(["stub-sglang", "--host", "127.0.0.1", "--port", str(port),
                     "--tokenizer", str(TOKENIZER_DIR)])
    err = capsys.readouterr().err
    assert code == 1
    assert f"cannot listen on 127.0.0.1:{port}" in err and "Traceback" not in err and err.count("\n") == 1


def test_produce_interrupted_exits_130_like_the_other_commands(monkeypatch, capsys):
    import eaglefeed.producers
    from eaglefeed.core.lifecycle import StopSignal
    from eaglefeed.producers.publisher import ProduceSummary

    def interrupted(cfg, *, stop):
        stop.set()  # Ctrl-C while publishing
        return ProduceSummary(rows=3, published=3)

    monkeypatch.setattr(StopSignal, "install", lambda self: self)
    monkeypatch.setattr(eaglefeed.producers, "run_producer", interrupted)
    assert main(["produce", "in.jsonl", "--tokenizer", "t"]) == 130
    assert main(["produce", "in.jsonl", "--tokenizer", "t", "--follow"]) == 0  # --follow ends only so
    monkeypatch.setattr(eaglefeed.producers, "run_producer", lambda cfg, *, stop: ProduceSummary())
    assert main(["produce", "in.jsonl", "--tokenizer", "t"]) == 0
