"""The reliability run's own Kafka broker, which a scenario may stop and start again mid-run."""

from __future__ import annotations

from pathlib import Path

from eaglefeed.devtools import localbroker
from eaglefeed.devtools.startup import free_port


class Broker:
    """A local broker on a fixed data directory and port, so a restart is the same broker.

    Args:
        data_dir: storage, settings and logs of the broker.
        cache_dir: the Kafka jar cache.
    """

    def __init__(self, *, data_dir: Path, cache_dir: Path) -> None:
        self.data_dir = data_dir
        self.cache_dir = cache_dir
        self.port = free_port()

    @property
    def bootstrap(self) -> str:
        """The bootstrap address."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The broker's pid while it runs."""
        return localbroker.status(self.data_dir).pid

    def start(self) -> Broker:
        """Start the broker (again) and wait until it serves; returns self."""
        localbroker.start(data_dir=self.data_dir, port=self.port, cache_dir=self.cache_dir)
        return self

    def stop(self) -> None:
        """Stop the broker (SIGTERM: a clean shutdown, as an operator's restart would do)."""
        localbroker.stop(self.data_dir)
