"""Tool calls for tool-bearing prompts: which tools the prompt offers, and a call of one of them.

A TEST DOUBLE's honest shortcut, not a model: the offered tools are read back from the prompt by
decoding the system turn that holds the Hermes/Qwen ``<tools>`` block (one JSON schema a line),
and a call names one of them, chosen by the request's seeded draws, with arguments from the
schema's property names. The call text is encoded with the served tokenizer, so the output ids
are the tokens a model writing that text would emit.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass

from eaglefeed.devtools.standin.output.draws import Draws
from eaglefeed.devtools.standin.vocab import Vocab

_BLOCK = re.compile(r"<tools>\n(.*?)\n</tools>", re.DOTALL)
_ARG_VALUES = ("Paris", "42", "celsius", "/tmp/a.txt", "alice@example.com", "latest news", "3", "true")


@dataclass(frozen=True)
class OfferedTool:
    """A tool the prompt offers: its function name and its parameters' names."""

    name: str
    params: tuple[str, ...]


def offered_tools(input_ids: list[int], vocab: Vocab) -> tuple[OfferedTool, ...]:
    """The tools listed in the prompt's ``<tools>`` block (empty when there is none to read).

    Only the turn holding the first ``<tools>`` mention is decoded (up to the next end-of-turn
    id), not the whole prompt.
    """
    start = _first_marker(input_ids, vocab)
    if start is None:
        return ()
    try:
        end = input_ids.index(vocab.eos_id, start)
    except ValueError:
        end = len(input_ids)
    return _parse_block(vocab.decode(input_ids[start:end], skip_special_tokens=False))


def call_ids(rng: Draws, vocab: Vocab, offered: tuple[OfferedTool, ...]) -> list[int]:
    """One call body (the JSON between the tags) naming an offered tool, as token ids."""
    name, arguments = pick_call(rng, offered)
    text = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return list(vocab.tokenizer.encode(text, add_special_tokens=False).ids)


def pick_call(rng: Draws, offered: tuple[OfferedTool, ...]) -> tuple[str, dict[str, str]]:
    """One call of an offered tool: its name and arguments from its schema's property names."""
    tool = offered[rng.randrange(len(offered))]
    return tool.name, {param: _ARG_VALUES[rng.randrange(len(_ARG_VALUES))] for param in tool.params[:3]}


def answers_a_tool_result(input_ids: list[int], vocab: Vocab) -> bool:
    """Whether the prompt's last turn before the generation prompt holds tool responses.

    A model that was just given its tool's result answers with text; calling again is left to
    prompts whose last turn is a user message.
    """
    end_id = vocab.tokenizer.token_to_id("</tool_response>")
    turn_id = vocab.tokenizer.token_to_id("<|im_start|>")
    if end_id is None or turn_id is None:
        return False
    for index in range(len(input_ids) - 1, -1, -1):
        if input_ids[index] == end_id:
            return input_ids[index:].count(turn_id) <= 1  # only the generation prompt's turn follows
    return False


def _first_marker(input_ids: list[int], vocab: Vocab) -> int | None:
    found = [i for marker in vocab.tools_markers if (i := find_subsequence(input_ids, marker)) is not None]
    return min(found) if found else None


def find_subsequence(haystack: list[int], needle: tuple[int, ...]) -> int | None:
    """Index of the first contiguous occurrence of ``needle`` in ``haystack``, or None."""
    if not needle:
        return None
    first, size, start = needle[0], len(needle), 0
    while True:
        try:
            start = haystack.index(first, start)
        except ValueError:
            return None
        if tuple(haystack[start:start + size]) == needle:
            return start
        start += 1


@functools.lru_cache(maxsize=256)
def _parse_block(text: str) -> tuple[OfferedTool, ...]:
    match = _BLOCK.search(text)
    if match is None:
        return ()
    tools = []
    for line in match.group(1).splitlines():
        try:
            spec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(spec, dict):
            continue
        fn = spec.get("function", spec)
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str) or not name:
            continue
        params = fn.get("parameters")
        props = params.get("properties") if isinstance(params, dict) else None
        tools.append(OfferedTool(name, tuple(props) if isinstance(props, dict) else ()))
    return tuple(tools)
