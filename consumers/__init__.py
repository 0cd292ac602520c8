"""The consuming stages: generate workers and the training-data sink."""

from consumers.sink import SinkSummary, run_sink
from consumers.worker import run_worker

__all__ = ["SinkSummary", "run_sink", "run_worker"]
