"""``eaglefeed produce``: read prompt files, render and tokenize each prompt, publish it."""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry

from eaglefeed.config import ProducerConfig
from eaglefeed.deadletter import dead_letter
from eaglefeed.errors import InputError
from eaglefeed.kafka import ensure_topics, make_producer, pipeline_topics
from eaglefeed.metrics import ProducerMetrics, serve_metrics
from producers.prompts import last_turn, parse_row, prompt_id
from producers.render import PromptRenderer
from schemas import PROMPT

log = logging.getLogger(__name__)


@dataclass
class ProduceSummary:
    """Counts of one producer run."""

    published: int = 0
    dead_lettered: int = 0
    bad_by_reason: dict[str, int] = field(default_factory=dict)
    prompt_tokens: int = 0


def run_producer(cfg: ProducerConfig, *, registry: CollectorRegistry | None = None) -> ProduceSummary:
    """Publish every prompt of ``cfg.inputs``; bad lines go to the dead-letter topic.

    Returns:
        the counts of published and dead-lettered lines.
    """
    registry = registry or CollectorRegistry()
    metrics = ProducerMetrics.create(registry)
    serve_metrics(registry, cfg.metrics_port)
    renderer = PromptRenderer(cfg.tokenizer)
    ensure_topics(cfg.kafka, pipeline_topics(cfg.kafka, cfg.partitions))
    producer = make_producer(cfg.kafka)
    summary = ProduceSummary()
    sampling = dataclasses.asdict(cfg.sampling)
    try:
        for source, line_no, raw in _lines(cfg.inputs):
            started = time.perf_counter()
            try:
                record = _prompt_record(cfg, renderer, sampling, source, line_no, raw)
            except InputError as exc:
                producer.send(cfg.kafka.dead_letter_topic, key=f"{source}:{line_no}".encode(),
                              value=dead_letter(stage="produce", kind=exc.reason, message=str(exc),
                                                source=source, line=line_no, value=raw[:65536]))
                summary.dead_lettered += 1
                summary.bad_by_reason[exc.reason] = summary.bad_by_reason.get(exc.reason, 0) + 1
                metrics.lines_bad.labels(exc.reason).inc()
                continue
            metrics.render_seconds.observe(time.perf_counter() - started)
            producer.send(cfg.kafka.prompts_topic, key=record["prompt_id"].encode(),
                          value=PROMPT.encode(record))
            summary.published += 1
            summary.prompt_tokens += len(record["input_ids"])
            metrics.prompts_published.inc()
            metrics.prompt_tokens.inc(len(record["input_ids"]))
        producer.flush()
    finally:
        producer.close()
    return summary


def _prompt_record(cfg: ProducerConfig, renderer: PromptRenderer, sampling: dict[str, object],
                   source: str, line_no: int, raw: bytes) -> dict[str, object]:
    try:
        row = json.loads(raw)
    except UnicodeDecodeError as exc:
        raise InputError("invalid_utf8", f"line is not valid UTF-8: {exc}") from exc
    except (json.JSONDecodeError, RecursionError) as exc:
        raise InputError("invalid_json", f"line is not valid JSON: {exc}") from exc
    conv = parse_row(row, default_id=str(line_no))
    turn = last_turn(conv)
    params = {**sampling, **conv.sampling_overrides}
    params["stop_token_ids"] = list(params.get("stop_token_ids") or [])
    kwargs = {**cfg.chat_template_kwargs, **conv.template_kwargs}
    input_ids = renderer.render(turn.messages, tools=conv.tools, template_kwargs=kwargs)
    if len(input_ids) > cfg.max_prompt_tokens:
        raise InputError("prompt_too_long",
                         f"prompt has {len(input_ids)} tokens, more than --max-prompt-tokens "
                         f"{cfg.max_prompt_tokens}")
    settings = {"sampling": params, "template_kwargs": kwargs,
                "tokenizer": renderer.tokenizer_hash, "template": renderer.chat_template_hash}
    return {
        "prompt_id": prompt_id(turn, tools=conv.tools, render_settings=settings),
        "source": source,
        "source_row": conv.row_id,
        "turn_index": turn.turn_index,
        "input_ids": input_ids,
        "num_samples": cfg.samples,
        "sampling_params": params,
        "chat_template_kwargs": json.dumps(kwargs, sort_keys=True),
        "tokenizer_id": renderer.tokenizer_id,
        "tokenizer_hash": renderer.tokenizer_hash,
        "chat_template_hash": renderer.chat_template_hash,
        "created_at": int(time.time() * 1000),
    }


def _lines(inputs: tuple[str, ...]) -> Iterator[tuple[str, int, bytes]]:
    """Yield (source, 1-based line number, raw line) for every non-blank line of every input."""
    for name in inputs:
        if name == "-":
            yield from _numbered("<stdin>", sys.stdin.buffer)
            continue
        path = Path(name)
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.suffix in (".jsonl", ".json"))
        else:
            files = [path]
        for file in files:
            with open(file, "rb") as fh:
                yield from _numbered(str(file), fh)


def _numbered(source: str, fh: object) -> Iterator[tuple[str, int, bytes]]:
    for line_no, raw in enumerate(fh, start=1):  # type: ignore[call-overload]
        if raw.strip():
            yield source, line_no, raw.rstrip(b"\r\n")
