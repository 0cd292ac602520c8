"""eaglefeed.core.connect: reaching the broker is bounded in time, stoppable, and says why in one line."""

import logging
import time

import pytest
from kafka.errors import KafkaError, KafkaTimeoutError

from eaglefeed.core import connect as connect_mod
from eaglefeed.core.config import KafkaConfig
from eaglefeed.core.connect import connect
from eaglefeed.core.errors import KafkaUnreachableError, StopRequestedError
from eaglefeed.core.lifecycle import StopSignal

CFG = KafkaConfig(bootstrap_servers="nowhere:9999", connect_timeout=0.6)
REFUSED = "Connection failed: KafkaConnectionError: 111 ECONNREFUSED"


def refusing(attempts):
    def build(ms):
        attempts.append(ms)
        logging.getLogger("kafka.net.manager").error(REFUSED)
        logging.getLogger("kafka.net.manager").error(  # says nothing about why: not the cause
            "Bootstrap failed: KafkaTimeoutError: Unable to bootstrap from nowhere:9999")
        time.sleep(0.05)
        raise KafkaTimeoutError("Unable to bootstrap from nowhere:9999")
    return build


def test_a_client_is_built_again_while_the_broker_cannot_be_reached():
    attempts = []

    def build(ms):
        attempts.append(ms)
        if len(attempts) < 3:
            raise KafkaTimeoutError("no broker yet")
        return "client"

    assert connect(build, CFG, "consumer", timeout=10) == "client" and len(attempts) == 3
    assert all(ms <= connect_mod.ATTEMPT_SECONDS * 1000 for ms in attempts)  # short attempts: Ctrl-C is seen

    def fatal(_ms):
        raise KafkaError("not retriable")

    with pytest.raises(KafkaError):
        connect(fatal, CFG, "consumer")


def test_an_unreachable_broker_fails_in_bounded_time_with_one_line_naming_address_and_cause(caplog):
    caplog.set_level(logging.DEBUG)
    started = time.monotonic()
    with pytest.raises(KafkaUnreachableError) as err:
        connect(refusing([]), CFG, "producer")
    assert 0.6 <= time.monotonic() - started < 3
    assert "nowhere:9999" in str(err.value) and "ECONNREFUSED" in str(err.value)
    assert "--connect-timeout" in str(err.value) and "\n" not in str(err.value)
    assert not [r for r in caplog.records if r.name.startswith("kafka.")]  # kafka-python's lines quieted
    logging.getLogger("kafka.net.manager").error("after the connect")  # and only while connecting
    assert [r.getMessage() for r in caplog.records if r.name.startswith("kafka.")] == ["after the connect"]


def test_a_stop_while_connecting_ends_the_wait_at_once(monkeypatch):
    stop = StopSignal()
    monkeypatch.setattr("eaglefeed.core.lifecycle._installed", [stop])
    attempts = []
    build = refusing(attempts)

    def build_then_stop(ms):
        stop.set()
        return build(ms)

    started = time.monotonic()
    with pytest.raises(StopRequestedError, match="nowhere:9999"):
        connect(build_then_stop, KafkaConfig(bootstrap_servers="nowhere:9999", connect_timeout=60), "x")
    assert len(attempts) == 1 and time.monotonic() - started < 1


def test_refused_credentials_fail_at_once():
    def build(_ms):
        logging.getLogger("kafka.net.connection").error(
            "<KafkaConnection>: Connection lost: SaslAuthenticationFailedError: Authentication failed")
        raise KafkaTimeoutError("Unable to bootstrap")

    with pytest.raises(KafkaUnreachableError, match="Authentication failed.*SASL/TLS"):
        connect(build, KafkaConfig(connect_timeout=60), "admin client")
