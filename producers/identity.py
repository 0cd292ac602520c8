"""One topic prefix, one identity: a run's prompts must use the tokenizer and chat template in use there.

The identity in use is the one of the first record found on the prompts topic (an empty topic
has none, and the run's own becomes it). Reading it costs one record per partition at most.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from kafka import TopicPartition

from eaglefeed.core.clients import Reader
from eaglefeed.core.errors import ConfigError, SchemaError
from eaglefeed.schemas import PROMPT

READ_SECONDS = 30.0  # to fetch a first record the broker says is there


@dataclass(frozen=True)
class PromptIdentity:
    """What a prompt was rendered with: ``tokenizer_id`` names it, the two hashes are the identity."""

    tokenizer_id: str
    tokenizer_hash: str
    chat_template_hash: str

    def describe(self) -> str:
        """``demo (tokenizer ab12cd34ef56…, template 0123456789ab…)``."""
        return (f"{self.tokenizer_id} (tokenizer {self.tokenizer_hash[:12]}…, "
                f"template {self.chat_template_hash[:12]}…)")


@dataclass(frozen=True)
class RendererIdentity:
    """A run's renderer: its tokenizer and the template hashes it records, without and with tools."""

    tokenizer_id: str
    tokenizer_hash: str
    template_hashes: frozenset[str]

    def matches(self, other: PromptIdentity) -> bool:
        """Whether a prompt of ``other`` could have come from this renderer."""
        return (other.tokenizer_hash == self.tokenizer_hash
                and other.chat_template_hash in self.template_hashes)

    def describe(self) -> str:
        """``demo (tokenizer ab12cd34ef56…, template 0123456789ab…)``."""
        templates = ", ".join(f"{h[:12]}…" for h in sorted(self.template_hashes))
        return f"{self.tokenizer_id} (tokenizer {self.tokenizer_hash[:12]}…, template {templates})"


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
                                          prompt["chat_template_hash"])
    raise ConfigError(f"could not read the first prompt of {topic} within {seconds:.0f} s, to check that "
                      "this run's tokenizer is the one in use there")


def check_identity(in_use: PromptIdentity | None, ours: RendererIdentity, *, topic: str) -> None:
    """Refuse, in one line naming both, a run whose renderer is not the one of the prompts on ``topic``.

    Raises:
        ConfigError: the tokenizer's files hash or the chat template's hash differ.
    """
    if in_use is None or ours.matches(in_use):
        return
    what = "tokenizer" if in_use.tokenizer_hash != ours.tokenizer_hash else "chat template"
    raise ConfigError(f"{topic} holds prompts of another {what}: {in_use.describe()}; this run renders with "
                      f"{ours.describe()}. One topic prefix makes one dataset of one tokenizer: use another "
                      "--topic-prefix, or pass --allow-mixed to publish into it anyway")
