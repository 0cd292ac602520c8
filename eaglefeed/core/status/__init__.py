"""Status records a stage publishes of itself, on a compacted topic of its own, for ``eaglefeed status``."""

from eaglefeed.core.status.sender import CLOSE_SECONDS, PRODUCER_SETTINGS, StatusSender

__all__ = ["CLOSE_SECONDS", "PRODUCER_SETTINGS", "StatusSender"]
