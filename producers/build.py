"""Rows → encoded PromptRecords or rejections, a batch at a time. Pure: no Kafka, runs in any process."""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from eaglefeed.chat.conversation import (
    Ended,
    NextPrompt,
    conversation_id,
    first_messages,
    start,
    turn_prompt_id,
)
from eaglefeed.chat.conversation.reasons import TEMPLATE_ERROR, TRUNCATED
from eaglefeed.chat.prompts import (
    Conversation,
    PromptTurn,
    all_turns,
    canonical_json,
    last_turn,
    parse_row,
    prompt_id_from_json,
    source_identity,
)
from eaglefeed.chat.render import PromptRenderer, RenderJob
from eaglefeed.chat.sampling import check_sampling
from eaglefeed.chat.toolcalls import Detected, choose_format, has_tools, unknown_format
from eaglefeed.core.config import PromptSettings
from eaglefeed.core.errors import ConfigError, InputError, SchemaError
from eaglefeed.core.mixes import TEMPLATE_KWARGS_FLAG
from eaglefeed.dataset import load_done
from eaglefeed.producers.identity import RendererIdentity
from eaglefeed.producers.settings import FileOverrides, merge_template_kwargs
from eaglefeed.producers.sources import DEAD_LETTER_VALUE_CAP, SourceRow, Unreadable
from eaglefeed.schemas import PROMPT
from eaglefeed.schemas.conversation_events import TURN_ZERO_LANE, conversation_event

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Rejected:
    """A row (or one turn of it) that cannot become a prompt, with the reason."""

    source: str
    line: int
    reason: str
    message: str
    raw: bytes


@dataclass
class BatchResult:
    """What one batch of rows became."""

    prompts: list[tuple[bytes, bytes, int]] = field(default_factory=list)  # (prompt_id, record, tokens)
    events: list[tuple[bytes, bytes]] = field(default_factory=list)  # (key, ConversationEvent): started/ended
    rejected: list[Rejected] = field(default_factory=list)
    # (source, line) → the first prompt id the row became: how a line dead-lettered before is seen fixed
    lines: dict[tuple[str, int], str] = field(default_factory=dict)
    skipped_done: int = 0
    rows: int = 0
    render_seconds: float = 0.0
    renderer: RendererIdentity | None = None  # what the prompts were rendered with


@dataclass(frozen=True)
class _Merged:
    """Sampling parameters and template kwargs of a row after all overrides."""

    sampling: dict[str, Any]
    kwargs: dict[str, Any]
    kwargs_json: str
    settings_json: tuple[str, str]  # the render settings in canonical JSON, without and with tools


@dataclass
class _Pending:
    row: SourceRow
    conv: Conversation
    turn: PromptTurn
    merged: _Merged
    group: tuple[str, str]
    prompt_id: str
    conversation_id: str | None = None  # set for the first prompt of a regenerated conversation


class PromptBuilder:
    """Parse, render, tokenize, validate and encode rows.

    Args:
        settings: the run's prompt settings.
        fast: batched rendering; None: when render.py's start-up probe agrees.

    Raises:
        ConfigError: when the command-line sampling parameters, template kwargs or tool format are
            invalid; :meth:`build` raises it for a conversation with tools whose format ``auto``
            cannot tell (the run stops: its turns could not be read).
    """

    def __init__(self, settings: PromptSettings, *, fast: bool | None = None) -> None:
        self.settings = settings
        self.renderer = PromptRenderer(settings.tokenizer, fast=fast,
                                       trust_remote_code=settings.trust_remote_code)
        self._template_kwargs = dict(settings.chat_template_kwargs)
        try:
            self._sampling = check_sampling(settings.sampling.as_params())
            merge_template_kwargs(self._template_kwargs, reserved=self.renderer.reserved_kwargs)
        except InputError as exc:
            raise ConfigError(str(exc)) from exc
        self._mix = settings.mix
        for kwargs, _weight in self._mix.template_kwargs:
            try:
                merge_template_kwargs(kwargs, reserved=self.renderer.reserved_kwargs)
            except InputError as exc:
                raise ConfigError(f"{TEMPLATE_KWARGS_FLAG}: {exc}") from exc
        self.done = load_done(settings.skip_done, settings.samples) if settings.skip_done else frozenset()
        # Conversation runs record the tool-call format in each lane's state, for `eaglefeed converse`.
        self.tool_format: Detected | None = None
        if settings.conversations:
            try:
                self.tool_format = choose_format(settings.tool_format, self.renderer.tokenizer)
            except ValueError as exc:
                raise ConfigError(str(exc)) from exc
        self._merged: dict[tuple[str, str, str, int | None, int | None], _Merged] = {}
        self.model = settings.prompt_model  # what every prompt says it is for (PromptRecord v3)
        r = self.renderer
        self.identity = RendererIdentity(r.tokenizer_id, r.tokenizer_hash,
                                         frozenset({r.template_hash(None), r.template_hash([{}])}),
                                         self.model)

    def build(self, rows: Sequence[SourceRow]) -> BatchResult:
        """Turn ``rows`` into records; every row ends as records, rejections or skips."""
        result = BatchResult(rows=len(rows), renderer=self.identity)
        pending: list[_Pending] = []
        for row in rows:
            try:
                self._expand(row, pending, result)
            except InputError as exc:
                result.rejected.append(_reject(row, exc))
            except ConfigError:
                raise  # the run's settings, not the row: stop
            except Exception as exc:  # noqa: BLE001 - a bug must not lose the row: dead-letter it, loudly
                log.exception("unexpected error on %s line %d", row.source, row.line)
                result.rejected.append(_reject(row, InputError("internal_error", repr(exc))))
        started = time.perf_counter()
        rendered = self.renderer.render_many([
            RenderJob(messages=p.turn.messages, tools=p.conv.tools, template_kwargs=p.merged.kwargs,
                      group=p.group)
            for p in pending])
        result.render_seconds = time.perf_counter() - started
        created_at = int(time.time() * 1000)
        for p, ids in zip(pending, rendered, strict=True):
            if p.conversation_id is not None:
                self._first_prompt(p, ids, created_at, result)
                continue
            try:
                result.prompts.append(self._encode(p, ids, created_at))
            except InputError as exc:
                result.rejected.append(_reject(p.row, exc))
            else:
                result.lines.setdefault((p.row.source, p.row.line), p.prompt_id)
        return result

    def _expand(self, row: SourceRow, pending: list[_Pending], result: BatchResult) -> None:
        conv = parse_row(_decode(row), default_id=str(row.line))
        merged = self._merge(row.overrides, conv, self._draw(conv))
        if self.settings.conversations:
            self._start_conversation(row, conv, merged, pending, result)
            return
        turns = all_turns(conv) if self.settings.turns == "all" else [last_turn(conv)]
        tools_json = canonical_json(conv.tools) if conv.tools else "null"
        settings_json = merged.settings_json[bool(conv.tools)]
        for turn in turns:
            pid = prompt_id_from_json(turn, tools_json=tools_json, settings_json=settings_json,
                                      source_id=conv.row_id if self.settings.keep_duplicates else None)
            if self.done and int(pid, 16) in self.done:
                result.skipped_done += 1
                continue
            pending.append(_Pending(row, conv, turn, merged, (tools_json, merged.kwargs_json), pid))

    def _start_conversation(self, row: SourceRow, conv: Conversation, merged: _Merged,
                            pending: list[_Pending], result: BatchResult) -> None:
        """Queue turn 0 of a regenerated conversation for the batched renderer (see :meth:`_first_prompt`).

        Raises:
            InputError: the row has no user turn to start from, or starts with an assistant turn.
        """
        fmt = self.tool_format
        if fmt is not None and fmt.name is None and has_tools(conv.tools, conv.messages):
            raise ConfigError(unknown_format(self.settings.tokenizer, fmt))
        cid = conversation_id(conv, settings_json=merged.settings_json[bool(conv.tools)],
                              mode=self.settings.history, keep_duplicates=self.settings.keep_duplicates)
        pid = turn_prompt_id(cid, 0, 0)
        if self.done and int(pid, 16) in self.done:
            result.skipped_done += 1  # its later turns were published when this one was generated
            return
        tools_json = canonical_json(conv.tools) if conv.tools else "null"
        pending.append(_Pending(row, conv, PromptTurn(0, first_messages(conv)), merged,
                                (tools_json, merged.kwargs_json), pid, conversation_id=cid))

    def _first_prompt(self, p: _Pending, ids: list[int] | InputError, created_at: int,
                      result: BatchResult) -> None:
        """Turn 0 of a regenerated conversation: one prompt for all samples, plus its ``started`` event.

        Later turns are published by ``eaglefeed converse``; sample ``s`` continues lane ``s``. A
        first turn the template rejects ends every lane at once (``truncated``/``template_error``).
        """
        mode, cid, samples = self.settings.history, str(p.conversation_id), self.settings.samples

        def event(lane: int, kind: str, **extra: Any) -> tuple[bytes, bytes]:
            return conversation_event(conversation_id=cid, history_mode=mode, source=p.row.source,
                                      source_row=p.conv.row_id, lane=lane, event=kind, turn_index=0,
                                      **extra)

        first: NextPrompt | Ended = Ended(TRUNCATED, TEMPLATE_ERROR, 0)
        if not isinstance(ids, InputError):
            # The lane's state keeps the template kwargs turn 0 was rendered with (command line,
            # mix entry, file and row merged), so that converse renders every later turn the same.
            conv = dataclasses.replace(p.conv, template_kwargs=p.merged.kwargs)
            first = start(conv, mode=mode, max_turns=self.settings.max_turns, lane=0,
                          renderer=self.renderer, conversation_id=cid, input_ids=ids,
                          tool_format=(self.tool_format.name or "") if self.tool_format else "")
        if isinstance(first, Ended):
            result.events.append(event(TURN_ZERO_LANE, "started", lanes=samples))
            result.events.extend(event(lane, "ended", outcome=first.outcome, reason=first.reason)
                                 for lane in range(samples))
            return
        try:
            result.prompts.append(self._encode(p, first.input_ids, created_at,
                                               conversation=first.state.to_json()))
        except InputError as exc:  # e.g. too long: the row is dead-lettered, no conversation started
            result.rejected.append(_reject(p.row, exc))
            return
        result.lines.setdefault((p.row.source, p.row.line), p.prompt_id)
        result.events.append(event(TURN_ZERO_LANE, "started", lanes=samples))

    def _draw(self, conv: Conversation) -> tuple[int | None, int | None]:
        """The sampling mix's entries for this row: drawn from what the row is, before it is rendered."""
        if not self._mix.active:
            return None, None
        return self._mix.draw(source_identity(conv, keep_duplicates=self.settings.keep_duplicates))

    def _merge(self, overrides: FileOverrides, conv: Conversation,
               drawn: tuple[int | None, int | None]) -> _Merged:
        # Rows of one file mostly share their overrides, so merged settings are cached on their text.
        key = (overrides.key, canonical_json(conv.sampling_overrides) if conv.sampling_overrides else "",
               canonical_json(conv.template_kwargs) if conv.template_kwargs else "", *drawn)
        merged = self._merged.get(key)
        if merged is None:
            # The mix's entries sit between the command line and the file: they are command-line
            # settings, so an overrides file or the row itself still wins over them.
            t, k = drawn
            cycled = {} if t is None else {"temperature": self._mix.temperatures[t][0]}
            cycled_kwargs = {} if k is None else self._mix.template_kwargs[k][0]
            sampling = {**self._sampling, **cycled, **overrides.sampling, **conv.sampling_overrides}
            kwargs = merge_template_kwargs(self._template_kwargs, cycled_kwargs, overrides.template_kwargs,
                                           conv.template_kwargs, reserved=self.renderer.reserved_kwargs)
            renderer = self.renderer
            plain, tooled = (canonical_json({
                "sampling": sampling, "template_kwargs": kwargs, "tokenizer": renderer.tokenizer_hash,
                "template": renderer.template_hash([{}] if tools else None)})
                for tools in (False, True))
            merged = _Merged(sampling, kwargs, json.dumps(kwargs, sort_keys=True), (plain, tooled))
            if len(self._merged) < 4096:
                self._merged[key] = merged
        return merged

    def _encode(self, p: _Pending, ids: list[int] | InputError, created_at: int, *,
                conversation: str | None = None) -> tuple[bytes, bytes, int]:
        if isinstance(ids, InputError):
            raise ids
        if len(ids) > self.settings.max_prompt_tokens:
            raise InputError("prompt_too_long", f"prompt has {len(ids)} tokens, more than "
                                                f"--max-prompt-tokens {self.settings.max_prompt_tokens}")
        record = {
            "prompt_id": p.prompt_id,
            "source": p.row.source,
            "source_row": p.conv.row_id,
            "turn_index": p.turn.turn_index,
            "input_ids": ids,
            "num_samples": self.settings.samples,
            "sampling_params": p.merged.sampling,
            "chat_template_kwargs": p.merged.kwargs_json,
            "tokenizer_id": self.renderer.tokenizer_id,
            "tokenizer_hash": self.renderer.tokenizer_hash,
            "chat_template_hash": self.renderer.template_hash(p.conv.tools),
            "created_at": created_at,
            "conversation": conversation,
            "model": self.model,
        }
        try:
            value = PROMPT.encode(record)
        except SchemaError as exc:
            raise InputError("encode_error", f"the record cannot be encoded: {exc}") from exc
        return p.prompt_id.encode(), value, len(ids)


def _decode(row: SourceRow) -> object:
    if isinstance(row.value, Unreadable):  # the reader already knows this row is bad
        raise InputError(row.value.reason, row.value.message)
    if row.raw is None:
        return row.value
    try:
        return json.loads(row.raw)
    except UnicodeDecodeError as exc:
        raise InputError("invalid_utf8", f"line is not valid UTF-8: {exc}") from exc
    except (json.JSONDecodeError, RecursionError) as exc:
        raise InputError("invalid_json", f"line is not valid JSON: {exc}") from exc


def _reject(row: SourceRow, exc: InputError) -> Rejected:
    raw = row.raw
    if raw is None:
        raw = b"" if isinstance(row.value, Unreadable) else json.dumps(row.value, default=str).encode()
    return Rejected(source=row.source, line=row.line, reason=exc.reason, message=str(exc),
                    raw=raw[:DEAD_LETTER_VALUE_CAP])
