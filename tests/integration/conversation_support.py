"""Helpers of the conversation integration tests: run the pipeline with the converse stage, and
re-render every turn independently (the tokenizer's own apply_chat_template, nothing of eaglefeed)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from transformers import AutoTokenizer

from eaglefeed.core.config import KafkaConfig, ProducerConfig, PromptSettings, SamplingDefaults
from eaglefeed.core.kafka import ensure_topics, pipeline_topics
from eaglefeed.dataset.manifest import live_segments, read_manifest
from eaglefeed.devtools.demo import TOKENIZER_DIR
from eaglefeed.ops.conversation_status import ConversationFeed, ConversationView
from eaglefeed.producers import run_producer
from tests.cli import kafka_flags, start_cli

Message = dict[str, Any]


class Pipeline:
    """Every stage as its own process, as deployed (a test can SIGKILL a worker): the converse
    stage and the sink start at once, workers when asked. ``trust_remote_code``: every stage
    (``EAGLEFEED_TRUST_REMOTE_CODE``) and the producer may run a tokenizer's own code."""

    def __init__(self, kafka: KafkaConfig, url: str, out: Path, logs: Path, *,
                 trust_remote_code: bool = False) -> None:
        self.kafka, self.url, self.out, self.logs = kafka, url, out, logs
        self.trust_remote_code = trust_remote_code
        ensure_topics(kafka, pipeline_topics(kafka, 3))  # the stages subscribe to topics that exist
        self.workers: list[subprocess.Popen[bytes]] = []
        self.stages = {"converse": self._spawn("converse", []),
                       "sink": self._spawn("sink", ["--output", str(out), "--flush-seconds", "0.3"])}

    def _spawn(self, name: str, args: list[str]) -> subprocess.Popen[bytes]:
        env = {**os.environ, "EAGLEFEED_TRUST_REMOTE_CODE": "1"} if self.trust_remote_code else None
        return start_cli(name.split("-")[0], *args, *kafka_flags(self.kafka), log=self.logs / f"{name}.log",
                         env=env)

    def start_worker(self, *flags: str) -> subprocess.Popen[bytes]:
        proc = self._spawn(f"generate-{len(self.workers)}", ["--sglang-url", self.url, "--concurrency", "8",
                                                             "--commit-interval", "0.2", *flags])
        self.workers.append(proc)
        return proc

    def produce(self, inputs: Path, *, mode: str, samples: int, max_turns: int = 8,
                sampling: SamplingDefaults | None = None, tokenizer: Path = TOKENIZER_DIR) -> None:
        summary = run_producer(ProducerConfig(
            kafka=self.kafka, inputs=(str(inputs),), partitions=3, prompts=PromptSettings(
                tokenizer=str(tokenizer), samples=samples, history=mode, max_turns=max_turns,
                trust_remote_code=self.trust_remote_code,
                sampling=sampling or SamplingDefaults(max_new_tokens=200))))
        assert summary.dead_lettered == 0, summary.describe()

    def wait_ended(self, lanes: int, timeout: float = 180.0, *, turns: int | None = None) -> ConversationView:
        """Until every lane of the conversations topic has ended (or, with ``turns``, that many are done)."""
        feed = ConversationFeed(kafka=self.kafka)
        try:
            deadline = time.monotonic() + timeout
            view = None
            while time.monotonic() < deadline:
                view = feed.read()
                if view is not None and turns is not None and view.turns_done >= turns:
                    return view
                if view is not None and view.lanes >= lanes and view.in_progress == 0 and turns is None:
                    return view
                self._check_threads()
                time.sleep(0.3)
            raise AssertionError(f"conversations did not end: {view}")
        finally:
            feed.close()

    def wait_rows(self, count: int, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        rows = 0
        while time.monotonic() < deadline:
            live = live_segments(read_manifest(self.out)) if (self.out / "manifest.jsonl").exists() else {}
            rows = sum(s["rows"] for s in live.values())
            if rows >= count:
                return
            self._check_threads()
            time.sleep(0.3)
        raise AssertionError(f"{rows} rows in the dataset, expected {count}")

    def _check_threads(self) -> None:
        for name, proc in self.stages.items():
            if proc.poll() is not None:
                raise AssertionError(f"{name} exited with {proc.returncode}: see {self.logs}/{name}.log")

    def close(self) -> None:
        for proc in [*self.workers, *self.stages.values()]:
            if proc.poll() is None:
                proc.terminate()  # a clean stop: what is buffered is written and committed
        for name, proc in self.stages.items():
            code = proc.wait(timeout=60)
            assert code == 0, f"{name} exited with {code}: see {self.logs}/{name}.log"
        for proc in self.workers:
            proc.wait(timeout=60)


def read_rows(out: Path) -> list[dict[str, Any]]:
    return pq.read_table(out / "segments").to_pylist()


def lanes_of(rows: list[dict[str, Any]]) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """Rows per (conversation, lane), by turn; asserts each turn is there exactly once."""
    lanes: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        assert row["conversation_id"] is not None and row["lane"] is not None
        lanes[(row["conversation_id"], row["lane"])].append(row)
    for key, turns in lanes.items():
        turns.sort(key=lambda r: r["turn_index"])
        assert [r["turn_index"] for r in turns] == list(range(len(turns))), key
    return lanes


class Rerendering:
    """What each turn's prompt must be, rebuilt from the source row and the earlier turns' rows."""

    def __init__(self) -> None:
        self.tok = AutoTokenizer.from_pretrained(str(TOKENIZER_DIR))
        self.think_open = self.tok.convert_tokens_to_ids("<think>")
        self.think_close = self.tok.convert_tokens_to_ids("</think>")
        self.stops = set(self.tok.all_special_ids)

    def render(self, source: dict[str, Any], messages: list[Message], *, tokenize: bool = True) -> Any:
        return self.tok.apply_chat_template(messages, tools=source.get("tools"), add_generation_prompt=True,
                                            tokenize=tokenize, **source.get("chat_template_kwargs", {}))

    def ids(self, source: dict[str, Any], messages: list[Message]) -> list[int]:
        out = self.render(source, messages)
        return list(out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out)

    def rerender_prompts(self, source: dict[str, Any], turns: list[dict[str, Any]]) -> list[list[int]]:
        """``rerender``: turn k = the template on the source's turn-0 messages, each earlier
        output as an assistant message (reasoning, content, tool calls), and the source's
        messages that follow each of those turns (its own assistant turns left out)."""
        return rerender_walk(source, turns, ids=self.ids, assistant=self.assistant)

    def tokens_prompts(self, source: dict[str, Any], turns: list[dict[str, Any]]) -> list[list[int]]:
        """``tokens``: turn k = turn k-1's prompt + its output + the template's text after that
        assistant turn's content (found in the source rendered up to the next assistant turn),
        tokenized: from its end-of-turn marker, or after it when the output's stop token was it."""
        messages = source["messages"]
        position = first_assistant(messages)
        prompts = [self.ids(source, [dict(m) for m in messages[:position]])]
        for row in turns[:-1]:
            after, nxt = following(messages, position)
            text = self.render(source, [dict(m) for m in messages[:nxt]], tokenize=False)
            run_end = position
            while run_end + 1 < len(messages) and messages[run_end + 1]["role"] == "assistant":
                run_end += 1
            count = sum(1 for m in messages[:run_end + 1] if m["role"] == "assistant")
            starts = [m.start() for m in re.finditer(re.escape("<|im_start|>assistant"), text)]
            end = text.index("<|im_end|>", starts[count - 1])
            output = row["input_ids"][row["prompt_len"]:]
            if output and output[-1] in self.stops:  # the turn's own stop token closed it already
                end += len("<|im_end|>")
            suffix = list(self.tok(text[end:], add_special_tokens=False)["input_ids"])
            prompts.append(list(row["input_ids"]) + suffix)
            position = nxt
        return prompts

    def assistant(self, row: dict[str, Any], after: list[Message]) -> Message:
        """The generated turn as a chat client would send it back."""
        out = list(row["input_ids"][row["prompt_len"]:])
        if out and out[-1] in self.stops:
            out = out[:-1]
        message: Message = {"role": "assistant"}
        content = out
        if self.think_close in out:
            cut = out.index(self.think_close)
            reasoning = [t for t in out[:cut] if t != self.think_open]
            content = out[cut + 1:]
            message["reasoning_content"] = self.decode(reasoning).strip()
        elif self.think_open in out:
            cut = out.index(self.think_open)
            message["reasoning_content"] = self.decode(out[cut + 1:]).strip()
            content = out[:cut]
        text = self.decode(content)
        calls = [json.loads(body) for body in re.findall(r"<tool_call>(.*?)</tool_call>", text, re.S)]
        message["content"] = re.sub(r"<tool_call>.*?</tool_call>", "", text, flags=re.S).strip()
        if calls:
            results = [m for m in after if m["role"] == "tool"]
            message["tool_calls"] = [
                {"type": "function", "function": {"name": c["name"], "arguments": c["arguments"]},
                 **({"id": results[k]["tool_call_id"]} if "tool_call_id" in results[k] else {})}
                for k, c in enumerate(calls)]
        return message

    def decode(self, ids: list[int]) -> str:
        return str(self.tok.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))


def first_assistant(messages: list[Message]) -> int:
    user = next(i for i, m in enumerate(messages) if m["role"] == "user")
    return next((i for i in range(user, len(messages)) if messages[i]["role"] == "assistant"), len(messages))


def following(messages: list[Message], position: int) -> tuple[list[Message], int]:
    """The source's messages after its assistant turn at ``position``, and where its next one is."""
    start = position
    while start < len(messages) and messages[start]["role"] == "assistant":
        start += 1
    end = next((i for i in range(start, len(messages)) if messages[i]["role"] == "assistant"), len(messages))
    return [dict(m) for m in messages[start:end]], end


def rerender_walk(source: dict[str, Any], turns: list[dict[str, Any]], *,
                  ids: Callable[[dict[str, Any], list[Any]], list[int]],
                  assistant: Callable[[dict[str, Any], list[Any]], Any]) -> list[list[int]]:
    """Every turn's independent re-rendering.

    ``ids`` of the source's turn-0 messages, then of the history grown by each earlier output
    (``assistant``) and the source messages that follow it.
    """
    messages = source["messages"]
    position = first_assistant(messages)
    history = [dict(m) for m in messages[:position]]
    prompts = [ids(source, history)]
    for row in turns[:-1]:
        after, position = following(messages, position)
        history += [assistant(row, after), *after]
        prompts.append(ids(source, history))
    return prompts
