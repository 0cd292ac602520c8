"""The worker's status records: built from its servers, sent beside the data path, never in its way."""

from __future__ import annotations

import asyncio
import logging
import threading
from types import SimpleNamespace

import httpx
import pytest
from kafka.errors import KafkaTimeoutError

from eaglefeed.consumers.generate import status_report
from eaglefeed.consumers.generate.inference import Load, ServerPool
from eaglefeed.consumers.generate.status_report import StatusReport, reporting
from eaglefeed.core.config import KafkaConfig, WorkerConfig
from eaglefeed.core.errors import StopRequestedError
from eaglefeed.core.status import PRODUCER_SETTINGS, StatusSender
from eaglefeed.core.status import sender as status_sender
from eaglefeed.schemas import WORKER_STATUS
from eaglefeed.schemas.worker_status import workers_topic
from tests.fakes.kafka import FakeKafka
from tests.running import wait_until

KAFKA = KafkaConfig(topic_prefix="t")
TOPIC = workers_topic("t")
URLS = ("http://a:30000", "http://b:30000")


def config(**over):
    return WorkerConfig(**{"kafka": KAFKA, "sglang_urls": URLS, "worker_id": "host-9", **over})


def pool():
    servers = ServerPool(client=httpx.AsyncClient(), urls=URLS, eject_after=3, probe_interval=1.0)
    a, b = servers.servers
    a.limit, a.sequences, a.rows_done = 48, 40, 300
    b.limit, b.healthy = 16, False
    return servers


def sender(fake, **over):
    fake.create_topic(TOPIC)
    return StatusSender(topic=TOPIC, new_producer=lambda: fake.producer(**PRODUCER_SETTINGS),
                        ensure_topic=lambda: None, **over)


def decoded(fake):
    return [(r.key, None if r.value is None else WORKER_STATUS.decode(r.value)) for r in fake.read(TOPIC)]


def test_the_record_holds_each_servers_limit_load_and_rows():
    auto = SimpleNamespace(loads={URLS[0]: Load(running=38.0, waiting=1.0), URLS[1]: None})
    report = StatusReport(cfg=config(), pool=pool(), auto=auto, prompts_done=lambda: 150,  # type: ignore[arg-type]
                          sender=None, interval=5.0)  # type: ignore[arg-type]
    key, value = report.record()
    record = WORKER_STATUS.decode(value)
    assert key == b"host-9" and record["group_id"] == "t-generate" and record["concurrency"] is None
    assert (record["prompts_done"], record["rows_done"], record["interval_seconds"]) == (150, 300, 5.0)
    assert record["servers"] == [
        {"url": URLS[0], "healthy": True, "limit": 48, "running": 38.0, "waiting": 1.0, "in_flight": 40,
         "rows_done": 300},
        {"url": URLS[1], "healthy": False, "limit": 16, "running": None, "waiting": None, "in_flight": 0,
         "rows_done": 0}]



def test_a_server_out_of_rotation_reports_no_load_and_the_worker_its_prompts_in_flight():
    # the auto limiter still holds b's last reading from before it left rotation
    auto = SimpleNamespace(loads={URLS[0]: Load(running=38.0, waiting=1.0), URLS[1]: Load(running=50.0,
                                                                                          waiting=7.0)})
    report = StatusReport(cfg=config(), pool=pool(), auto=auto, prompts_done=lambda: 150,  # type: ignore[arg-type]
                          sender=None, prompts_in_flight=lambda: 12)  # type: ignore[arg-type]
    record = WORKER_STATUS.decode(report.record()[1])
    assert [(s["healthy"], s["running"], s["waiting"]) for s in record["servers"]] == [
        (True, 38.0, 1.0), (False, None, None)]
    assert record["prompts_in_flight"] == 12

def test_a_fixed_concurrency_reports_no_limits_and_no_loads():
    servers = ServerPool(client=httpx.AsyncClient(), urls=URLS, eject_after=3, probe_interval=1.0)
    report = StatusReport(cfg=config(concurrency=32), pool=servers, auto=None, prompts_done=lambda: 0,
                          sender=None)  # type: ignore[arg-type]
    record = WORKER_STATUS.decode(report.record()[1])
    assert record["concurrency"] == 32
    assert [(s["limit"], s["running"], s["waiting"]) for s in record["servers"]] == [(None, None, None)] * 2


def test_a_record_at_once_then_one_per_change_of_a_limit(monkeypatch):
    monkeypatch.setattr(status_report, "CHECK_INTERVAL", 0.01)
    offered = []
    servers = pool()
    report = StatusReport(cfg=config(), pool=servers, auto=None, prompts_done=lambda: 0,
                          sender=SimpleNamespace(offer=offered.append), interval=60.0)  # type: ignore[arg-type]

    async def scenario():
        task = asyncio.get_running_loop().create_task(report.run())
        await asyncio.sleep(0.1)
        assert len(offered) == 1  # nothing changed: the next one is due in a minute
        servers.servers[0].limit = 96
        await asyncio.sleep(0.1)
        task.cancel()

    asyncio.run(scenario())
    assert [WORKER_STATUS.decode(v)["servers"][0]["limit"] for _, v in offered] == [48, 96]


def test_the_sender_publishes_on_a_plain_producer_of_its_own_and_a_tombstone_last():
    fake = FakeKafka()
    send = sender(fake)
    report = StatusReport(cfg=config(), pool=pool(), auto=None, prompts_done=lambda: 3,
                          sender=send)
    send.offer(report.record())
    wait_until(lambda: len(fake.read(TOPIC)) == 1, what="the first record")
    send.close((b"host-9", None))
    assert [key for key, _ in decoded(fake)] == [b"host-9", b"host-9"]
    assert decoded(fake)[-1][1] is None
    [producer] = fake.producers
    assert producer.closed and producer.transactional_id is None and producer.settings["acks"] == 1


def test_only_the_newest_record_waits_while_a_send_is_slow():
    fake = FakeKafka()
    gate = fake.block_sends()
    send = sender(fake)
    send.offer((b"w", b"first"))
    wait_until(lambda: send._pending is None, what="the first send to start")
    for value in (b"second", b"third", b"fourth"):
        send.offer((b"w", value))  # never blocks, however long the broker takes
    gate.set()
    send.close(None)
    assert [r.value for r in fake.read(TOPIC)] == [b"first", b"fourth"]


def test_a_failure_is_logged_once_and_the_next_record_still_goes(caplog):
    fake = FakeKafka()
    send = sender(fake)
    fake.fail_sends(KafkaTimeoutError("metadata"), count=2, at_send=True)
    with caplog.at_level(logging.WARNING, logger=status_sender.__name__):
        for left, value in ((1, b"1"), (0, b"2")):
            send.offer((b"w", value))
            wait_until(lambda n=left: len(fake.send_failures) == n, what=f"send {value!r} to fail")
        send.offer((b"w", b"3"))
        wait_until(lambda: fake.read(TOPIC), what="the third send")
        send.close(None)
    warnings = [r for r in caplog.records if "cannot publish the status" in r.getMessage()]
    assert len(warnings) == 1
    assert [r.value for r in fake.read(TOPIC)][-1] == b"3"


def test_a_producer_that_cannot_be_built_never_reaches_the_worker(caplog):
    def broken():
        raise KafkaTimeoutError("no broker")

    send = StatusSender(topic=TOPIC, new_producer=broken, ensure_topic=lambda: None)
    with caplog.at_level(logging.WARNING, logger=status_sender.__name__):
        send.offer((b"w", b"x"))
        send.close((b"w", None))
    assert sum("cannot publish" in r.getMessage() for r in caplog.records) == 1


def test_reporting_publishes_while_the_worker_runs_and_a_tombstone_after_a_clean_stop(monkeypatch):
    fake = FakeKafka()
    created = []
    monkeypatch.setattr(status_report, "ensure_topics", lambda kafka, partitions, configs: (
        created.append((partitions, configs)), fake.create_topic(TOPIC)))
    servers = pool()

    async def worker(fails: BaseException | None):
        before = len(fake.read(TOPIC)) if TOPIC in fake.partitions else 0
        async with reporting(config(), fake, pool=servers, auto=None, prompts_done=lambda: 1, interval=60.0):
            for _ in range(500):
                if fake.partitions.get(TOPIC) and len(fake.read(TOPIC)) > before:
                    break
                await asyncio.sleep(0.01)
            if fails is not None:
                raise fails

    asyncio.run(worker(None))
    assert created == [({TOPIC: 1}, {TOPIC: status_report.WORKERS_TOPIC_CONFIG})]
    assert [v is None for _, v in decoded(fake)] == [False, True]
    with pytest.raises(StopRequestedError):  # stopped while connecting to its servers: clean too
        asyncio.run(worker(StopRequestedError("stopped while connecting")))
    assert [v is None for _, v in decoded(fake)] == [False, True, False, True]


def test_a_failed_worker_leaves_its_last_record(monkeypatch):
    fake = FakeKafka()
    monkeypatch.setattr(status_report, "ensure_topics", lambda *a, **k: fake.create_topic(TOPIC))

    async def worker():
        async with reporting(config(), fake, pool=pool(), auto=None, prompts_done=lambda: 1, interval=60.0):
            for _ in range(500):
                if fake.partitions.get(TOPIC) and fake.read(TOPIC):
                    break
                await asyncio.sleep(0.01)
            raise RuntimeError("a prompt task failed")

    with pytest.raises(RuntimeError):
        asyncio.run(worker())
    [(key, record)] = decoded(fake)
    assert key == b"host-9" and record is not None  # status shows it stale once it ages


def test_without_clients_nothing_is_reported():
    async def worker():
        async with reporting(config(), None, pool=pool(), auto=None, prompts_done=lambda: 0):
            return threading.active_count()

    before = threading.active_count()
    assert asyncio.run(worker()) == before  # no sender thread
