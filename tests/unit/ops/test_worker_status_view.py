"""``status``'s workers section: the newest report per worker, fresh or stale, or none at all."""

from __future__ import annotations

from eaglefeed.core.config import KafkaConfig
from eaglefeed.ops.pipeline_status import Snapshot, StageView, render
from eaglefeed.ops.worker_status import WorkersFeed, WorkersView, newest_reports
from eaglefeed.schemas import WORKER_STATUS
from eaglefeed.schemas.worker_status import server_status, worker_status, worker_tombstone, workers_topic
from tests.fakes.kafka import FakeKafka

NOW = 1_800_000_000_000
TOPIC = "eaglefeed.workers"


def report(worker_id="host-1", *, age=1.0, interval=5.0, concurrency=None, servers=None):
    servers = servers if servers is not None else [
        server_status(url="http://gpu-a:30000", healthy=True, limit=96, running=90.0, waiting=3.0,
                      in_flight=96, rows_done=1200),
        server_status(url="http://gpu-b:30000", healthy=False, limit=16, running=None, waiting=None,
                      in_flight=0, rows_done=7)]
    return worker_status(worker_id=worker_id, group_id="eaglefeed-generate",
                         updated_at=int(NOW - age * 1000), interval_seconds=interval,
                         concurrency=concurrency, prompts_done=600, servers=servers)


def view(*records, exists=True):
    return WorkersView(topic=TOPIC, exists=exists, reports=newest_reports(records), read_at=NOW)


def test_a_fresh_worker_shows_each_servers_limit_running_and_waiting():
    lines = view(report()).lines()
    assert lines[0] == f"workers: 1 reporting in {TOPIC}"
    assert lines[1].split() == ["host-1", "auto", "prompts", "600", "rows", "1207", "1s", "ago"]
    assert lines[2].split() == ["server", "limit", "running", "waiting", "in", "flight", "rows"]
    assert lines[3].split() == ["http://gpu-a:30000", "96", "90", "3", "96", "1200"]
    assert lines[4].split() == ["http://gpu-b:30000", "16", "-", "-", "0", "7", "out", "of", "rotation"]


def test_a_fixed_concurrency_worker_has_no_limits_of_its_own():
    servers = [server_status(url="http://x", healthy=True, limit=None, running=None, waiting=None,
                             in_flight=5, rows_done=1)]
    lines = view(report(concurrency=32, servers=servers)).lines()
    assert lines[1].split()[1:3] == ["fixed", "32"]
    assert lines[3].split() == ["http://x", "-", "-", "-", "5", "1"]


def test_a_report_older_than_three_intervals_is_stale_with_its_age_and_no_servers():
    lines = view(report("old", age=302.0), report("new", age=2.0)).lines()
    assert lines[0] == f"workers: 2 reporting in {TOPIC}, 1 of them stale"
    assert lines[1].startswith("  new ") and "2s ago" in lines[1]
    stale = next(line for line in lines if line.startswith("  old "))
    assert stale.endswith("STALE: last report 5m02s ago")
    assert lines[-1] == stale  # sorted by id, and a stale worker's old numbers are not shown
    assert not view(report(age=14.0)).stale(view(report(age=14.0)).reports["host-1"])  # < 3 x 5 s


def test_the_newest_record_of_a_key_wins_and_a_tombstone_removes_it():
    first, second = report(age=10.0), report(age=1.0)
    assert newest_reports([first, second])["host-1"]["updated_at"] == NOW - 1000
    assert newest_reports([first, worker_tombstone("host-1")]) == {}
    assert set(newest_reports([first, worker_tombstone("host-1"), report("host-2")])) == {"host-2"}
    # a record this version cannot read hides the key's older one (it is not the newest any more)
    assert newest_reports([first, (b"host-1", b"\xc3\x01garbage")]) == {}


def test_no_topic_and_an_empty_topic_say_no_worker_reports():
    assert view(exists=False).lines() == [f"workers: no worker reports in {TOPIC} (the topic does not exist: "
                                          "no worker of this version ran yet)"]
    assert view().lines() == [f"workers: no worker reports in {TOPIC}"]


def test_as_dict_carries_the_same_data():
    data = view(report("old", age=302.0), report("new")).as_dict()
    assert [(w["worker_id"], w["stale"], w["age_seconds"]) for w in data["workers"]] == [
        ("new", False, 1.0), ("old", True, 302.0)]
    assert data["workers"][0]["servers"][0]["limit"] == 96


def test_the_status_screen_has_the_workers_section_between_stages_and_dead_letters():
    snap = Snapshot(taken_at=0.0, prompts=10, stages=[StageView("generate", "eaglefeed.prompts", 5, 10, 1.0)],
                    dead_letters=0, dataset=None, workers=view(report()))
    screen = render(snap, KafkaConfig()).splitlines()
    at = screen.index(f"workers: 1 reporting in {TOPIC}")
    assert screen[at - 1] == "" and any(line.startswith("dead letters") for line in screen[at:])
    assert "workers" not in render(Snapshot(taken_at=0.0, prompts=0, stages=[], dead_letters=0, dataset=None),
                                   KafkaConfig())


def test_the_feed_reads_the_topic_from_its_start_at_every_refresh():
    fake = FakeKafka()
    kafka = KafkaConfig()
    feed = WorkersFeed(kafka=kafka, reader=fake.reader(), read_seconds=2.0)
    missing = feed.read()
    assert not missing.exists and missing.reports == {}
    fake.create_topic(workers_topic(kafka.topic_prefix))
    for key, value in (report("a"), report("b"), worker_tombstone("a")):
        fake.append(workers_topic(kafka.topic_prefix), value, key=key)
    assert set(feed.read().reports) == {"b"}
    assert set(feed.read().reports) == {"b"}  # read again from the start, not only what is new
    key, value = report("c")
    fake.append(workers_topic(kafka.topic_prefix), value, key=key)
    seen = feed.read()
    assert seen.exists and set(seen.reports) == {"b", "c"}
    assert WORKER_STATUS.decode(value) == seen.reports["c"]
    feed.close()
