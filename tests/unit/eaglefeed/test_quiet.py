"""eaglefeed.quiet drops exactly the library lines that mean nothing to a user."""

import logging

import eaglefeed  # noqa: F401 - importing the package installs the filters


def test_known_noise_is_dropped_and_everything_else_kept(caplog):
    caplog.set_level(logging.DEBUG)
    logging.getLogger("transformers").warning("PyTorch was not found. Models won't be available")
    logging.getLogger("kafka.net.selector").warning("Task %r ran 0.3s. It is blocking the event loop", "t")
    logging.getLogger("kafka.producer.sender").warning("Got error produce response on %s, retrying: %s",
                                                       "tp", "NotLeaderForPartitionError")
    logging.getLogger("kafka.producer.sender").warning("Got error produce response on %s: %s", "tp",
                                                       "MessageSizeTooLargeError")
    logging.getLogger("kafka.coordinator").warning("Marking the coordinator dead for group g: %s",
                                                   "[Error 16] NotCoordinatorError")
    logging.getLogger("transformers").warning("something else")
    assert [r.getMessage() for r in caplog.records] == [
        "Got error produce response on tp: MessageSizeTooLargeError", "something else"]
