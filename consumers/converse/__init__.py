"""The converse stage: each conversation prompt's generations → the next turn's prompt, or its end."""

from eaglefeed.consumers.converse.loop import ConverseSummary, run_converse

__all__ = ["ConverseSummary", "run_converse"]
