"""The sink: generations topic → deduplicated Parquet segments of a dataset, exactly once."""

from consumers.sink.checkpoint import SinkSummary
from consumers.sink.loop import run_sink

__all__ = ["SinkSummary", "run_sink"]
