"""Tool calls for tool-bearing prompts: which tools the prompt offers, and a call of one of them.

A TEST DOUBLE's honest shortcut, not a model: the offered tools are read back from the prompt the
way the served family's template declares them (``declarations``, keyed by ``--tool-call-format``):
only the span from that declaration's opening to its closing ids is decoded, and a call names
one of its tools, chosen by the request's seeded draws, with arguments from the schema's property
names. The call text is encoded with the served tokenizer, so the output ids are the tokens a
model writing that text would emit.
"""

from __future__ import annotations

import json
from typing import Any

from eaglefeed.devtools.standin.output.declarations import DECLARATIONS, Declaration, OfferedTool
from eaglefeed.devtools.standin.output.draws import Draws
from eaglefeed.devtools.standin.vocab import Vocab

_ARG_VALUES = ("Paris", "42", "celsius", "/tmp/a.txt", "alice@example.com", "latest news", "3", "true")

Ids = tuple[int, ...]


def offered_tools(input_ids: list[int], vocab: Vocab, fmt: str = "hermes") -> tuple[OfferedTool, ...]:
    """The tools the prompt declares the way family ``fmt``'s template does (empty: none to read)."""
    return declared_tools(input_ids, vocab, fmt) or ()


def declared_tools(input_ids: list[int], vocab: Vocab, fmt: str = "hermes") -> tuple[OfferedTool, ...] | None:
    """The tools of the prompt's declaration in family ``fmt``'s way; None when it holds none.

    Empty: a declaration is there but lists no tool that can be read (a call then names a
    made-up tool). Only the ids from the declaration's opening to its closing are decoded.
    A format without a declaration of its own (``none``) is read the Hermes way.
    """
    declaration = DECLARATIONS.get(fmt, DECLARATIONS["hermes"])
    opens, closes = _marks(vocab, fmt, declaration)
    if opens:
        found = [(i, len(mark)) for mark in opens if (i := find_subsequence(input_ids, mark)) is not None]
        if not found:
            return None
        start, size = min(found)
        after = start + size
    else:
        start = after = 0
    ends = [i for mark in closes if (i := find_subsequence(input_ids, mark, after)) is not None]
    end = min(ends, default=len(input_ids))
    return declaration.read(vocab.decode(input_ids[start:end], skip_special_tokens=False))


def call_ids(rng: Draws, vocab: Vocab, offered: tuple[OfferedTool, ...]) -> list[int]:
    """One call body (the JSON between the tags) naming an offered tool, as token ids."""
    name, arguments = pick_call(rng, offered)
    text = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return list(vocab.tokenizer.encode(text, add_special_tokens=False).ids)


def pick_call(rng: Draws, offered: tuple[OfferedTool, ...]) -> tuple[str, dict[str, Any]]:
    """One call of an offered tool: its name, and arguments for its first parameters, of their types.

    A value of the parameter's declared JSON type (a string when the declaration does not say):
    parsers that read values by the schema (GLM-4.5's) refuse a string where a number is due.
    """
    tool = offered[rng.randrange(len(offered))]
    types = tool.types + ("",) * (len(tool.params) - len(tool.types))
    return tool.name, {param: _value(kind, rng.randrange(len(_ARG_VALUES)))
                       for param, kind in zip(tool.params[:3], types, strict=False)}


def _value(kind: str, draw: int) -> Any:
    """The argument value of JSON type ``kind`` for one draw."""
    if kind in ("integer", "number"):
        return draw
    if kind == "boolean":
        return draw % 2 == 0
    if kind == "array":
        return [_ARG_VALUES[draw]]
    if kind == "object":
        return {}
    if kind == "null":
        return None
    return _ARG_VALUES[draw]


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


def find_subsequence(haystack: list[int], needle: tuple[int, ...], start: int = 0) -> int | None:
    """Index of the first contiguous occurrence of ``needle`` in ``haystack`` from ``start``, or None."""
    if not needle:
        return None
    first, size = needle[0], len(needle)
    while True:
        try:
            start = haystack.index(first, start)
        except ValueError:
            return None
        if tuple(haystack[start:start + size]) == needle:
            return start
        start += 1


# (id(tokenizer), fmt) -> (that tokenizer, opening ids, closing ids): a server serves one vocab for
# its life, so each mark is encoded once; the tokenizer is kept so that a reused id is not trusted.
_MARKS: dict[tuple[int, str], tuple[object, tuple[Ids, ...], tuple[Ids, ...]]] = {}


def _marks(vocab: Vocab, fmt: str, declaration: Declaration) -> tuple[tuple[Ids, ...], tuple[Ids, ...]]:
    key = (id(vocab.tokenizer), fmt)
    cached = _MARKS.get(key)
    if cached is None or cached[0] is not vocab.tokenizer:
        def ids(texts: tuple[str, ...]) -> tuple[Ids, ...]:
            return tuple(tuple(vocab.tokenizer.encode(t, add_special_tokens=False).ids) for t in texts)
        cached = _MARKS[key] = (vocab.tokenizer, ids(declaration.opens), ids(declaration.closes))
    return cached[1], cached[2]
