"""``produce --history rerender`` says so when no ``eaglefeed converse`` member is there to continue it."""

from __future__ import annotations

import json
import logging
import time

import pytest
from kafka import KafkaConsumer

from eaglefeed.cli.main import main
from eaglefeed.core.lag import LagProbe
from eaglefeed.devtools.demo import TOKENIZER_DIR

pytestmark = pytest.mark.kafka
HINT = "no `eaglefeed converse` is running in group"


def produce(kafka, tmp_path, *flags):
    rows = tmp_path / "chats.jsonl"
    rows.write_text(json.dumps({"id": "c1", "messages": [
        {"role": "user", "content": "Name a prime."}, {"role": "assistant", "content": "7."},
        {"role": "user", "content": "Another?"}, {"role": "assistant", "content": "11."}]}) + "\n")
    assert main(["produce", "--tokenizer", str(TOKENIZER_DIR), "--bootstrap-servers", kafka.bootstrap_servers,
                 "--topic-prefix", kafka.topic_prefix, "--state-dir", str(tmp_path / "state"), "--restart",
                 "--workers", "0", *flags, str(rows)]) == 0


def test_a_conversation_mode_without_a_converse_member_warns(kafka_config, tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    produce(kafka_config, tmp_path, "--history", "rerender")
    assert [r for r in caplog.records if HINT in r.getMessage()]
    caplog.clear()
    produce(kafka_config, tmp_path)  # --history original needs no converse stage
    assert not [r for r in caplog.records if HINT in r.getMessage()]

    member = KafkaConsumer(kafka_config.generations_topic, bootstrap_servers=kafka_config.bootstrap_servers,
                           group_id=kafka_config.default_group("converse"))
    try:
        # Joined, as a running converse stage is: judged by the group's member list, the same
        # question produce asks (an assignment can lag far behind under load, when the member
        # joined before the broker had the new topic's partitions to hand out).
        probe = LagProbe(kafka=kafka_config)
        try:
            deadline = time.monotonic() + 60
            while probe.members(kafka_config.default_group("converse")) == 0:
                assert time.monotonic() < deadline
                member.poll(timeout_ms=200)
        finally:
            probe.close()
        caplog.clear()
        produce(kafka_config, tmp_path, "--history", "tokens")
        assert not [r for r in caplog.records if HINT in r.getMessage()]
    finally:
        member.close()
