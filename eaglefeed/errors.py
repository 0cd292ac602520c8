"""The eaglefeed exception tree.

EaglefeedError
├── ConfigError          bad flags or environment
├── BrokerError          the local Kafka broker could not be set up, started or stopped
├── SchemaError          a record could not be encoded or decoded (see schemas.codec)
│   ├── UnknownSchemaError   the writer fingerprint is not one we know
│   └── CorruptRecordError   wrong marker, truncated or undecodable body
├── InputError           a prompt row cannot become a prompt (carries a reason code)
└── InferenceError       the inference server failed a request
├── RetryableInferenceError   connection trouble, timeouts, 408/409/425/429/5xx, aborts
└── FatalInferenceError       other 4xx: retrying will not help
"""

from __future__ import annotations


class EaglefeedError(Exception):
    """Base class of every error eaglefeed raises on purpose."""


class ConfigError(EaglefeedError):
    """Invalid configuration from flags or environment."""


class BrokerError(EaglefeedError):
    """The local Kafka broker could not be prepared, started or stopped."""


class SchemaError(EaglefeedError):
    """A record could not be encoded or decoded."""


class UnknownSchemaError(SchemaError):
    """A message names a writer schema (by fingerprint) that this reader does not know."""


class CorruptRecordError(SchemaError):
    """A message is not a valid single-object-encoded Avro record."""


class InputError(EaglefeedError):
    """A source row cannot become a prompt.

    Args:
        reason: a short stable reason code, used as a metric label and in dead letters.
        message: a human-readable explanation.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class InferenceError(EaglefeedError):
    """The inference server failed a request.

    Args:
        kind: a short stable code (``http_503``, ``connect``, ``timeout``, ``integrity`` ...).
        message: the server's message or a description.
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class RetryableInferenceError(InferenceError):
    """A failure that may succeed on another attempt."""


class FatalInferenceError(InferenceError):
    """A failure that will not succeed on retry (4xx other than 408/409/425/429)."""
