"""One topic prefix, one identity: a run's prompts must be of the tokenizer, template and model in use there.

The identity in use is the one of the first record found on the prompts topic (an empty topic
has none, and the run's own becomes it). Reading it costs one record per partition at most.
Models compare as ``eaglefeed.core.tokenizer.models`` says: by their last path component, an
unknown one matching any.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from kafka import TopicPartition

from eaglefeed.core.clients import Reader
from eaglefeed.core.errors import ConfigError, SchemaError
from eaglefeed.core.tokenizer import same_model
from eaglefeed.schemas import PROMPT

READ_SECONDS = 30.0  # to fetch a first record the broker says is there


@dataclass(frozen=True)
class PromptIdentity:
    """What a prompt was rendered with and for: ``tokenizer_id`` names it; hashes, model: the identity."""

    tokenizer_id: str
    tokenizer_hash: str
    chat_template_hash: str
    model: str | None = None  # None: the prompt does not say (PromptRecord v1, v2; or unknown)

    def describe(self) -> str:
        """``demo (tokenizer ab12cd34ef56…, template 0123456789ab…, model m)``."""
        model = f", model {self.model}" if self.model else ""
        return (f"{self.tokenizer_id} (tokenizer {self.tokenizer_hash[:12]}…, "
                f"template {self.chat_template_hash[:12]}…{model})")


@dataclass(frozen=True)
class RendererIdentity:
    """A run's renderer: its tokenizer, the template hashes it records (without and with tools), its model."""

    tokenizer_id: str
    tokenizer_hash: str
    template_hashes: frozenset[str]
    model: str | None = None

    def matches(self, other: PromptIdentity) -> bool:
        """Whether a prompt of ``other`` could have come from this renderer."""
        return self.differs(other) is None

    def differs(self, other: PromptIdentity) -> str | None:
        """What differs from ``other``, the most telling first (``tokenizer``); None: nothing."""
        if other.tokenizer_hash != self.tokenizer_hash:
            return "tokenizer"
        if other.chat_template_hash not in self.template_hashes:
            return "chat template"
        return None if same_model(self.model, other.model) else "model"

    def describe(self) -> str:
        """``demo (tokenizer ab12cd34ef56…, template 0123456789ab…, model m)``."""
        templates = ", ".join(f"{h[:12]}…" for h in sorted(self.template_hashes))
        model = f", model {self.model}" if self.model else ""
        return f"{self.tokenizer_id} (tokenizer {self.tokenizer_hash[:12]}…, template {templates}{model})"


def identity_in_use(reader: Reader, topic: str, *, seconds: float = READ_SECONDS) -> PromptIdentity | None:
    """The identity of the first prompt on ``topic``; None when the topic is missing or empty.

    Raises:
        ConfigError: the broker lists records it does not deliver within ``seconds``.
    """
    partitions = [TopicPartition(topic, p) for p in sorted(reader.partitions_for_topic(topic) or [])]
    if not partitions:
        return None
    reader.assign(partitions)
    begins, ends = reader.beginning_offsets(partitions), reader.end_offsets(partitions)
    holding = [tp for tp in partitions if ends[tp] > begins[tp]]
    if not holding:
        return None
    reader.assign(holding)
    for tp in holding:
        reader.seek(tp, begins[tp])
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for records in reader.poll(timeout_ms=500).values():
            for record in records:
                try:
                    prompt = PROMPT.decode(record.value) if record.value else None
                except SchemaError:  # the workers dead-letter it; the next record says the same
                    prompt = None
                if prompt is not None:
                    return PromptIdentity(prompt["tokenizer_id"], prompt["tokenizer_hash"],
                                          prompt["chat_template_hash"], prompt.get("model"))
    raise ConfigError(f"could not read the first prompt of {topic} within {seconds:.0f} s, to check that "
                      "this run's tokenizer is the one in use there")


def check_identity(in_use: PromptIdentity | None, ours: RendererIdentity, *, topic: str) -> None:
    """Refuse, in one line naming both, a run whose renderer is not the one of the prompts on ``topic``.

    Raises:
        ConfigError: the tokenizer's files hash, the chat template's hash or the model differ.
    """
    what = None if in_use is None else ours.differs(in_use)
    if in_use is None or what is None:
        return
    one = "model" if what == "model" else "tokenizer"
    raise ConfigError(f"{topic} holds prompts of another {what}: {in_use.describe()}; this run renders with "
                      f"{ours.describe()}. One topic prefix makes one dataset of one {one}: use another "
                      "--topic-prefix, or pass --allow-mixed to publish into it anyway")
