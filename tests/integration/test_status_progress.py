"""``eaglefeed status`` counts what a person means by progress: work finished out of order, the
workers' prompts in flight, a sink's buffered rows, and only the producer's prompts as produced."""

from __future__ import annotations

import threading
import time

import pytest
from kafka import KafkaConsumer
from kafka.structs import OffsetAndMetadata, TopicPartition

from eaglefeed.consumers.sink import run_sink
from eaglefeed.core.config import SinkConfig
from eaglefeed.core.kafka import ensure_topics, make_producer, pipeline_topics
from eaglefeed.core.lifecycle import StopSignal
from eaglefeed.ops.sink_status import SinksFeed
from eaglefeed.schemas import GENERATION
from eaglefeed.schemas.conversation_events import conversation_event
from eaglefeed.schemas.done_offsets import encode_done
from eaglefeed.schemas.worker_status import WORKERS_TOPIC_CONFIG, server_status, worker_status, workers_topic
from tests.cli import kafka_flags, run_cli
from tests.factories import generation_record
from tests.running import wait_until

pytestmark = pytest.mark.kafka


def _send(kafka, topic, records, *, partitions=None):
    producer = make_producer(kafka)
    for i, (key, value) in enumerate(records):
        producer.send(topic, key=key, value=value, partition=None if partitions is None else i % partitions)
    producer.flush()
    producer.close()


def _line(out, stage):
    return next(line for line in out.splitlines() if line.startswith(stage + " "))


def test_status_counts_out_of_order_work_prompts_in_flight_and_a_sinks_buffered_rows(kafka_config, tmp_path):
    ensure_topics(kafka_config, pipeline_topics(kafka_config, 2))
    prompts = kafka_config.prompts_topic
    _send(kafka_config, prompts, [(str(i).encode(), b"x") for i in range(30)], partitions=2)
    # What a worker commits when prompt 5 of partition 0 is slow and 7..12 finished after it: the
    # contiguous prefix as the offset, the done offsets above it in the metadata.
    group = KafkaConsumer(bootstrap_servers=kafka_config.bootstrap_servers,
                          group_id=kafka_config.default_group("generate"), enable_auto_commit=False)
    group.commit({TopicPartition(prompts, 0): OffsetAndMetadata(5, encode_done(5, range(7, 13)), -1),
                  TopicPartition(prompts, 1): OffsetAndMetadata(10, "", -1)})
    group.close()
    # its report: 4 prompts in flight, and a server that left rotation with its last loads still in it
    topic = workers_topic(kafka_config.topic_prefix)
    ensure_topics(kafka_config, {topic: 1}, configs={topic: WORKERS_TOPIC_CONFIG})
    servers = [server_status(url="http://gpu-a:30000", healthy=True, limit=8, running=3.0, waiting=0.0,
                             in_flight=4, rows_done=21),
               server_status(url="http://gpu-b:30000", healthy=False, limit=8, running=50.0, waiting=7.0,
                             in_flight=0, rows_done=0)]
    now = int(time.time() * 1000)
    report = worker_status(worker_id="w-1", group_id="g", updated_at=now, interval_seconds=60.0,
                           concurrency=None, prompts_done=21, servers=servers, prompts_in_flight=4)
    _send(kafka_config, topic, [report])
    # a real sink holding 12 generations for its default --flush-seconds (30 s)
    _send(kafka_config, kafka_config.generations_topic,
          [(f"p{i}:0".encode(), GENERATION.encode(generation_record(id=f"p{i}:0", prompt_id=f"p{i}",
                                                                    prompt_ids=[1, 2], output_ids=[3, 2])))
           for i in range(12)])
    stop = StopSignal()
    sink = threading.Thread(target=run_sink, args=(SinkConfig(kafka=kafka_config, output=tmp_path / "ds"),),
                            kwargs={"stop": stop}, daemon=True)
    sink.start()
    sinks = SinksFeed(kafka=kafka_config)
    try:
        wait_until(lambda: sinks.read().buffered() == 12, timeout=60, what="the sink's report of 12 buffered")
        out = run_cli("status", "--once", "--interval", "0.2", *kafka_flags(kafka_config), timeout=120)
    finally:
        sinks.close()
        stop.set()
        sink.join(60)
    assert out.returncode == 0, out.stderr
    # done: 5 + 6 out of order + 10; in flight: the worker's 4; waiting: the rest
    assert _line(out.stdout, "generate").split()[1:6] == [prompts, "21", "4", "5", "30"]
    assert "  generate: 6 of them finished out of order, above the committed offsets" in out.stdout
    sink_line = _line(out.stdout, "sink").split()
    assert sink_line[1:6] == [kafka_config.generations_topic, "12", "-", "0", "12"], sink_line
    assert sink_line[-1] != "-" and "ETA unknown" not in out.stdout
    assert "  sink: 12 of them buffered, written within --flush-seconds 30" \
        in out.stdout
    left = next(line for line in out.stdout.splitlines() if line.strip().startswith("http://gpu-b"))
    assert left.split() == ["http://gpu-b:30000", "8", "-", "-", "0", "0", "out", "of", "rotation"]


def test_produce_counts_the_producers_prompts_apart_from_converses_next_turns(kafka_config):
    ensure_topics(kafka_config, pipeline_topics(kafka_config, 1))
    _send(kafka_config, kafka_config.prompts_topic, [(f"c{i}".encode(), b"x") for i in range(8)])
    started = [conversation_event(conversation_id=f"c{i}", lane=-1, event="started", turn_index=0,
                                  history_mode="rerender", lanes=1) for i in range(8)]
    turns = [conversation_event(conversation_id=f"c{i}", lane=0, event="turn", turn_index=1,
                                history_mode="rerender") for i in range(3)]
    _send(kafka_config, kafka_config.conversations_topic, started + turns)
    # each turn event went out beside a next-turn prompt on the prompts topic
    _send(kafka_config, kafka_config.prompts_topic, [(f"c{i}-t1".encode(), b"x") for i in range(3)])
    out = run_cli("status", "--once", "--interval", "0.2", *kafka_flags(kafka_config), timeout=120)
    assert out.returncode == 0, out.stderr
    produce = _line(out.stdout, "produce")
    assert produce.split()[3] == "8" and "(+3 next-turn prompts published by converse)" in produce
    assert _line(out.stdout, "generate").split()[5] == "11"  # generate has both to do
