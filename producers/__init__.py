"""The producer stage: prompt files → rendered, tokenized PromptRecords on Kafka."""

from eaglefeed.producers.publisher import ProduceSummary, run_producer

__all__ = ["ProduceSummary", "run_producer"]
