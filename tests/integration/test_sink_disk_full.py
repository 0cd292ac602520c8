"""The sink on a filesystem that fills: it stops with one line naming the path and the space left,
commits nothing past what is durable, and a restart after space is freed writes every row once.

The test mounts a small tmpfs (the suite runs as root here); where mounting is refused it skips,
and the unit test at the write seam (``test_sink_writer_disk_full.py``) still covers the stop."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from eaglefeed.core.kafka import ensure_topics
from tests.cli import kafka_flags, run_cli
from tests.integration.test_sink_idle_exit import publish, written_ids

pytestmark = pytest.mark.kafka


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}); the write-seam unit test covers it")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def run_sink(kafka, out: Path, *flags: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EAGLEFEED_")}
    return run_cli("sink", "--output", str(out), *kafka_flags(kafka), "--flush-rows", "100",
                   "--flush-seconds", "0.3", "--exit-when-idle", "2", *flags, env=env, timeout=180)


def test_a_full_disk_stops_the_sink_with_one_line_and_a_restart_completes(kafka_config, small_disk):
    kafka = kafka_config
    ensure_topics(kafka, {kafka.generations_topic: 1, kafka.dead_letter_topic: 1})
    publish(kafka, range(3000))
    out = small_disk / "dataset"
    filler = small_disk / "filler"
    stat = os.statvfs(small_disk)
    # leave room for the manifest and a few segments, not for 3,000 rows
    filler.write_bytes(b"\0" * (stat.f_bavail * stat.f_frsize - 200_000))

    first = run_sink(kafka, out)
    text = first.stdout + first.stderr
    assert first.returncode == 1, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    lines = [line for line in text.splitlines() if "no space left" in line]
    assert lines and str(out) in lines[0] and "free" in lines[0], text[-3000:]
    durable = written_ids(out)
    assert 0 < len(durable) < 3000  # some segments landed before the disk filled

    filler.unlink()
    second = run_sink(kafka, out)
    assert second.returncode == 0, (second.stdout + second.stderr)[-3000:]
    ids = written_ids(out)
    assert len(ids) == len(set(ids)) == 3000
