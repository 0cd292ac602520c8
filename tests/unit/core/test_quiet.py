"""eaglefeed.core.quiet drops exactly the library lines that mean nothing to a user."""

import logging

import eaglefeed  # noqa: F401 - importing the package installs the filters


def test_known_noise_is_dropped_and_everything_else_kept(caplog):
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="kafka")  # an in-process `main()` of an earlier test raises it
    logging.getLogger("transformers").warning("PyTorch was not found. Models won't be available")
    logging.getLogger("kafka.net.selector").warning("Task %r ran 0.3s. It is blocking the event loop", "t")
    logging.getLogger("kafka.producer.sender").warning("Got error produce response on %s, retrying: %s",
                                                       "tp", "NotLeaderForPartitionError")
    logging.getLogger("kafka.producer.sender").warning("Got error produce response on %s: %s", "tp",
                                                       "MessageSizeTooLargeError")
    logging.getLogger("kafka.coordinator").warning("Marking the coordinator dead for group g: %s",
                                                   "[Error 16] NotCoordinatorError")
    transport = logging.getLogger("kafka.net.transport")
    try:  # a fetch answered after its consumer closed (CI saw it on the sink's clean exit)
        None.recv(4096)  # type: ignore[attr-defined]
    except AttributeError:
        transport.exception("%s: Error receiving network data closing socket",
                            "<KafkaTCPTransport [none] (closed)>")
        transport.exception("%s: Error receiving network data closing socket",
                            "<KafkaTCPTransport [127.0.0.1:9092] (connected)>")  # an open one: kept
    logging.getLogger("transformers").warning("something else")
    assert [r.getMessage() for r in caplog.records] == [
        "Got error produce response on tp: MessageSizeTooLargeError",
        "<KafkaTCPTransport [127.0.0.1:9092] (connected)>: Error receiving network data closing socket",
        "something else"]


def test_a_coordinator_lookup_loop_logs_once_per_throttle_period(caplog, monkeypatch):
    # While a dead coordinator is not yet fenced, kafka-python marks it dead hundreds of times a second.
    import eaglefeed.core.quiet as quiet

    now = [1000.0]
    monkeypatch.setattr(quiet.time, "monotonic", lambda: now[0])
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="kafka")  # an in-process `main()` of an earlier test raises it
    log = logging.getLogger("kafka.coordinator")
    for _ in range(500):
        log.warning("Marking the coordinator dead (node %s) for group %s: %s.", "coordinator-2", "g",
                    "Node Disconnected")
        now[0] += 0.002
    log.warning("Marking the coordinator dead (node %s) for group %s: %s.", "coordinator-2", "other",
                "Node Disconnected")
    now[0] += quiet.THROTTLE_SECONDS
    log.warning("Marking the coordinator dead (node %s) for group %s: %s.", "coordinator-2", "g",
                "Node Disconnected")
    log.warning("Heartbeat failed for group %s", "g")
    assert [r.getMessage() for r in caplog.records] == [
        "Marking the coordinator dead (node coordinator-2) for group g: Node Disconnected.",
        "Marking the coordinator dead (node coordinator-2) for group other: Node Disconnected.",
        "Marking the coordinator dead (node coordinator-2) for group g: Node Disconnected.",
        "Heartbeat failed for group g"]
