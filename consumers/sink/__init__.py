"""The sink: generations topic → deduplicated Parquet segments of a dataset, exactly once."""

from eaglefeed.consumers.sink.checkpoint import SinkSummary
from eaglefeed.consumers.sink.loop import run_sink

__all__ = ["SinkSummary", "run_sink"]
