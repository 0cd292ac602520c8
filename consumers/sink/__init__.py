"""The sink: generations topic → deduplicated Parquet segments of a dataset, exactly once."""

from consumers.sink.loop import SinkSummary, run_sink

__all__ = ["SinkSummary", "run_sink"]
