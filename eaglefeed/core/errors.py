"""The eaglefeed exception tree.

EaglefeedError
├── ConfigError                  bad flags or environment, or a server refusing our key or URL
│   ├── KafkaUnreachableError    no broker answered at the address within --connect-timeout
│   ├── ServerUnreachableError   an inference server never answered within --connect-timeout
│   └── MissingTopicError        a stage's input topic did not appear within --exit-when-idle
├── StopRequestedError           SIGINT/SIGTERM arrived before the stage had started (connecting)
├── BrokerError                  the local Kafka broker could not be set up, started or stopped
├── SchemaError                  a record could not be encoded or decoded (see eaglefeed.schemas.codec)
│   ├── UnknownSchemaError       the writer fingerprint is not one we know
│   └── CorruptRecordError       wrong marker, truncated or undecodable body
├── InputError                   a prompt row cannot become a prompt (carries a reason code)
├── RenderProcessError           a producer's render process died
├── DeliveryError                Kafka did not acknowledge a prompt record: the producer stops
├── InferenceError               the inference server failed a request (kind, attempts, retry_after)
│   ├── RetryableInferenceError  connection trouble, timeouts, 408/409/425/429/5xx, aborts
│   └── FatalInferenceError      other 4xx: retrying will not help
├── FatalPublishError            the worker cannot publish any more (fenced by a newer instance)
├── WorkerError                  the generate worker stopped on a failure it cannot work around
├── StageStalledError            a stage made no progress through a seek and a re-join: it exits
├── DiskFullError                a disk a stage writes to is full (the path and the space left)
├── StoreError                   the object store holding a dataset refused or failed an operation
├── ManifestError                a dataset's manifest is corrupt or changed under a writer
│   └── CompactionBusyError      another compaction holds the dataset
└── DatasetError                 a directory is not a dataset, or a file of it cannot be read

What each stage does when Kafka does not acknowledge a send is one policy, stated in
docs/RELIABILITY.md ("When Kafka does not acknowledge a record").
"""

from __future__ import annotations


class EaglefeedError(Exception):
    """Base class of every error eaglefeed raises on purpose."""


class ConfigError(EaglefeedError):
    """Invalid configuration from flags or environment."""


class KafkaUnreachableError(ConfigError):
    """No Kafka broker answered at the configured address within the connect timeout."""


class ServerUnreachableError(ConfigError):
    """An inference server never answered (any HTTP status) within the connect timeout."""


class MissingTopicError(ConfigError):
    """A stage run with ``--exit-when-idle`` waited that long for its input topics: they never appeared."""


class StopRequestedError(EaglefeedError):
    """A stop was asked for while the stage was still connecting: it exits without starting."""


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


class RenderProcessError(EaglefeedError):
    """A render process died; nothing after the last saved progress was lost, but the run stops."""


class DeliveryError(EaglefeedError):
    """Kafka did not acknowledge a record; the run stops without saving progress past it."""


class InferenceError(EaglefeedError):
    """The inference server failed a request.

    Args:
        kind: a short stable code (``http_503``, ``connect``, ``timeout``, ``integrity`` ...).
        message: the server's message or a description.
        attempts: requests sent for this work before giving up (0: none, or not counted).
        retry_after: seconds the server asked us to wait (its ``Retry-After``), if it said.
    """

    def __init__(self, kind: str, message: str, *, attempts: int = 0,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.attempts = attempts
        self.retry_after = retry_after

    def after(self, attempts: int) -> InferenceError:
        """The same failure (same class, kind, message and ``retry_after``) after ``attempts`` requests."""
        return type(self)(self.kind, str(self), attempts=attempts, retry_after=self.retry_after)


class RetryableInferenceError(InferenceError):
    """A failure that may succeed on another attempt."""


class FatalInferenceError(InferenceError):
    """A failure that will not succeed on retry (4xx other than 408/409/425/429)."""


class FatalPublishError(EaglefeedError):
    """Publishing cannot go on (e.g. this producer was fenced by a newer instance)."""


class WorkerError(EaglefeedError):
    """The worker stopped because of a failure it cannot work around."""


class StageStalledError(EaglefeedError):
    """A stage's consumer stalled through a seek and a re-join: it exits for a supervisor to restart it."""


class DiskFullError(EaglefeedError):
    """A disk a stage writes to has no space left; nothing past what is durable was committed."""


class StoreError(EaglefeedError):
    """The object store holding a dataset refused or failed an operation (the message says which and why).

    Not the data's fault: a stage stops with this one line, and nothing past what the store
    acknowledged was committed.
    """


class ManifestError(EaglefeedError):
    """The manifest is corrupt, or changed under a writer that expected it not to."""


class CompactionBusyError(ManifestError):
    """Another compaction holds the dataset."""


class DatasetError(EaglefeedError):
    """A directory is not an eaglefeed dataset, or a file of it cannot be read."""
