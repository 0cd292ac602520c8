"""The consuming stages: generate workers, the training-data sink and the conversation continuation."""

from consumers.converse import ConverseSummary, run_converse
from consumers.sink import SinkSummary, run_sink
from consumers.worker import run_worker

__all__ = ["ConverseSummary", "SinkSummary", "run_converse", "run_sink", "run_worker"]
