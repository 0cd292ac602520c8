"""eaglefeed.core.kafka builds kafka-python clients with our settings; core.clients hands them out."""

import threading

import pytest
from kafka.errors import KafkaConnectionError

import eaglefeed.core.kafka as kafka
from eaglefeed.core.clients import KafkaClients
from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.errors import ConfigError, MissingTopicError

CFG = KafkaConfig(bootstrap_servers="b:9092", client_id="me")


class Stub:
    """Records the settings a client class was built with."""

    built: list = []
    metadata_error = None

    def __init__(self, **settings):
        Stub.built.append(settings)
        self.settings = settings
        self.calls = []

    def partitions_for_topic(self, topic):
        self.calls.append(("partitions_for_topic", topic))
        if topic == "broken":
            raise KafkaConnectionError("restarting")
        return {0}

    def subscribe(self, topics, listener=None):
        self.calls.append(("subscribe", topics, listener))

    def topics(self):
        self.calls.append(("topics",))
        if Stub.metadata_error is not None:
            raise Stub.metadata_error
        return {"t"}


@pytest.fixture
def stubs(monkeypatch):
    Stub.built = []
    monkeypatch.setattr(kafka, "KafkaConsumer", Stub)
    monkeypatch.setattr(kafka, "KafkaProducer", Stub)
    return Stub.built


def test_the_consumer_never_commits_on_its_own_and_overrides_win(stubs):
    consumer = KafkaClients(kafka=CFG).consumer("grp", max_poll_records=7, session_timeout_ms=9000)
    s = consumer.settings
    assert s["group_id"] == "grp" and s["enable_auto_commit"] is False
    assert s["isolation_level"] == "read_committed" and s["auto_offset_reset"] == "earliest"
    assert s["bootstrap_servers"] == "b:9092" and s["client_id"] == "me"
    assert s["max_poll_records"] == 7 and s["session_timeout_ms"] == 9000
    assert s == kafka.make_consumer(CFG, "grp", max_poll_records=7, session_timeout_ms=9000).settings


def test_the_producer_is_idempotent_and_batches(stubs):
    producer = KafkaClients(kafka=CFG).producer(transactional_id="tx")
    s = producer.settings
    assert s["acks"] == "all" and s["enable_idempotence"] is True and s["compression_type"] == "zstd"
    assert s["transactional_id"] == "tx" and s["linger_ms"] == 5


def test_subscribe_loads_the_partitions_first_and_tolerates_a_restarting_broker(stubs):
    consumer = Stub()
    listener = object()
    KafkaClients(kafka=CFG).subscribe(consumer, ["t", "broken"], listener)
    # metadata once subscribed: kafka-python's coordinator takes its partition snapshot from it
    # (without it the first assignment is followed by a rebalance: tests/integration/test_two_pipelines.py)
    assert consumer.calls == [("partitions_for_topic", "t"), ("partitions_for_topic", "broken"),
                              ("subscribe", ["t", "broken"], listener), ("topics",)]
    Stub.metadata_error = KafkaConnectionError("restarting")
    try:
        KafkaClients(kafka=CFG).subscribe(Stub(), ["t"], listener)  # logged, not raised
    finally:
        Stub.metadata_error = None


def test_security_settings():
    sasl = KafkaConfig(security_protocol="sasl_ssl", sasl_mechanism="scram-sha-512", sasl_username="u",
                       sasl_password="secret", ssl_cafile="ca.pem")
    s = kafka.connection_settings(sasl)
    assert s["security_protocol"] == "SASL_SSL" and s["sasl_mechanism"] == "SCRAM-SHA-512"
    assert s["sasl_plain_username"] == "u" and s["ssl_cafile"] == "ca.pem"
    assert "security_protocol" not in kafka.connection_settings(CFG)
    with pytest.raises(ConfigError) as info:
        kafka.connection_settings(KafkaConfig(security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                                              sasl_password="secret"))
    assert "secret" not in str(info.value)
    with pytest.raises(ConfigError):
        kafka.connection_settings(KafkaConfig(security_protocol="TLS"))


class Admin:
    def __init__(self, answers):
        self.answers, self.closed = list(answers), False

    def list_topics(self):
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def close(self):
        self.closed = True


def test_wait_for_topics_asks_until_they_exist_or_it_is_stopped(monkeypatch):
    admin = Admin([KafkaConnectionError("restarting"), ["other"], ["other", "t"]])
    monkeypatch.setattr(kafka, "make_admin", lambda cfg: admin)
    assert KafkaClients(kafka=CFG).wait_for_topics(["t"], None) is True
    assert admin.closed
    stop = threading.Event()
    stop.set()
    assert kafka.wait_for_topics(CFG, ["t"], stop=stop, poll=0) is False


def test_wait_for_topics_gives_up_after_its_timeout_naming_the_prefixes_there_are(monkeypatch, caplog):
    caplog.set_level("INFO")
    admin = Admin([["demo.prompts", "demo.generations", "t123.prompts"]])
    monkeypatch.setattr(kafka, "make_admin", lambda cfg: admin)
    with pytest.raises(MissingTopicError) as raised:
        kafka.wait_for_topics(KafkaConfig(topic_prefix="edt"), ["edt.prompts"], poll=0.01, timeout=0.05)
    assert str(raised.value) == "no topic edt.prompts after 0.05 s; prefixes on the broker: demo, t123"
    waiting = [r.getMessage() for r in caplog.records if "waiting for topics" in r.getMessage()]
    assert waiting == ["waiting for topics ['edt.prompts'] to be created (by eaglefeed produce); "
                       "prefixes on the broker: demo, t123"]  # once
    assert admin.closed


def test_pipeline_topics():
    assert kafka.pipeline_topics(KafkaConfig(topic_prefix="x"), 4) == {
        "x.prompts": 4, "x.generations": 4, "x.dead-letter": 1, "x.conversations": 1}


class FlakyAdmin:
    """An admin client whose first request of each kind met a dead node of the cluster."""

    def __init__(self):
        self.calls = []
        self.failed = set()
        self.closed = False

    def _call(self, name, result):
        self.calls.append(name)
        if name not in self.failed:
            self.failed.add(name)
            raise KafkaConnectionError("111 ECONNREFUSED")
        return result

    def list_topics(self):
        return self._call("list_topics", ["old"])

    def create_topics(self, topics, raise_errors=True):
        assert raise_errors is False  # a retry after a partial success must not fail on "already exists"
        return self._call("create_topics", None)

    def wait_for_topics(self, topics, timeout_ms=None):
        return self._call("wait_for_topics", None)

    def close(self):
        self.closed = True


def test_ensure_topics_asks_again_after_meeting_a_dead_node(monkeypatch):
    # With one node of three down, an admin request can go to the dead one and fail at once;
    # the producer died of it at start-up (reliability scenario leader-kill).
    admin = FlakyAdmin()
    monkeypatch.setattr(kafka, "make_admin", lambda cfg: admin)
    monkeypatch.setattr(kafka.time, "sleep", lambda s: None)
    created = kafka.ensure_topics(CFG, {"old": 3, "new": 3}, timeout=30)
    assert created == {"new"} and admin.closed
    assert admin.calls == ["list_topics", "list_topics", "create_topics", "create_topics",
                           "wait_for_topics", "wait_for_topics"]


def test_ensure_topics_gives_up_at_its_deadline(monkeypatch):
    class Dead(FlakyAdmin):
        def list_topics(self):
            raise KafkaConnectionError("111 ECONNREFUSED")

    admin = Dead()
    monkeypatch.setattr(kafka, "make_admin", lambda cfg: admin)
    with pytest.raises(KafkaConnectionError):
        kafka.ensure_topics(CFG, {"t": 1}, timeout=0.2)
    assert admin.closed


def test_the_real_clients_create_topics_and_build_readers_with_our_builders(monkeypatch, stubs):
    admin = FlakyAdmin()
    monkeypatch.setattr(kafka, "make_admin", lambda cfg: admin)
    monkeypatch.setattr(kafka.time, "sleep", lambda s: None)
    assert KafkaClients(kafka=CFG).ensure_topics({"old": 3, "new": 1}) == {"new"}
    reader = KafkaClients(kafka=CFG).reader(auto_offset_reset="earliest")
    assert reader.settings == {"bootstrap_servers": "b:9092", "client_id": "me", "group_id": None,
                               "auto_offset_reset": "earliest"}


def test_topic_prefixes_are_read_from_the_pipeline_topics_only():
    topics = ["demo.prompts", "demo.generations", "t123.dead-letter", "a.b.workers", "__consumer_offsets",
              "other.thing", ".prompts"]
    assert kafka.topic_prefixes(topics) == ["a.b", "demo", "t123"]


def test_the_prefixes_named_are_all_of_them_or_the_closest_to_the_one_given():
    assert kafka.describe_prefixes([], "edt") == "the broker holds no eaglefeed topics"
    assert kafka.describe_prefixes(["demo", "t123"], "edt") == "prefixes on the broker: demo, t123"
    many = [f"run{n:02d}" for n in range(30)] + ["eaglefeed"]
    line = kafka.describe_prefixes(many, "eaglefed")
    assert line.startswith("prefixes on the broker (the 10 closest to 'eaglefed' of 31): ")
    assert "eaglefeed" in line.split(": ", 1)[1].split(", ")
