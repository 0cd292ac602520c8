"""Tool calls written in a named format (``--tool-call-format``), as the served tokenizer's ids.

A TEST DOUBLE, not a parser: it writes the text a model of that family emits for some calls and
encodes it with the served tokenizer, so each marker becomes its added token's id (as a model
samples it). The spellings come from ``eaglefeed.core.tokenizer.markers``, the one table the pipeline's
parsers read too; the layout of each format is written here independently of those parsers, so
that the end-to-end tests check one against the other.
"""

from __future__ import annotations

import json
from typing import Any

from eaglefeed.core.tokenizer import (
    HARMONY_CALL,
    HARMONY_CHANNEL,
    HARMONY_CONSTRAIN,
    HARMONY_END,
    HARMONY_MESSAGE,
    HARMONY_START,
    TOOL_FORMAT_TAGS,
)
from eaglefeed.devtools.standin.output.tools import find_subsequence
from eaglefeed.devtools.standin.vocab import Vocab

Call = tuple[str, dict[str, Any]]

# How a prompt shows the last turn is a tool's result and not the user's: (the text that opens a
# tool result, the text that opens a user turn) in each family's template.
_RESULT_AND_USER = {
    "kimi_k2": ("<|im_system|>tool<|im_middle|>", "<|im_user|>"),
    "deepseek_v3": ("<\uff5ctool\u2581output\u2581begin\uff5c>", "<\uff5cUser\uff5c>"),
    "deepseek_v31": ("<\uff5ctool\u2581output\u2581begin\uff5c>", "<\uff5cUser\uff5c>"),
    "glm45": ("<|observation|>", "<|user|>"),
    "llama3_json": ("<|start_header_id|>ipython", "<|start_header_id|>user"),
    "mistral": ("[TOOL_RESULTS]", "[INST]"),
    "gpt_oss": (f"{HARMONY_START}functions.", f"{HARMONY_START}user"),
}


def call_text(fmt: str, calls: list[Call]) -> str:
    """The text of ``calls`` (one turn's, in order) in format ``fmt``.

    Args:
        fmt: one of :data:`CALL_FORMATS` but ``hermes`` (written by ``generation`` itself).
        calls: (function name, arguments) pairs. Harmony: the first message's ``<|start|>
            assistant`` is already there (the prompt's, or the one after the analysis message);
            each call ends with ``<|call|>``, a real engine's stop (the double writes on).
    """
    def args(a: dict[str, Any]) -> str:
        return json.dumps(a, ensure_ascii=False)

    if fmt == "kimi_k2":
        sb, se, cb, ab, ce = TOOL_FORMAT_TAGS[fmt]
        return sb + "".join(f"{cb}functions.{n}:{k}{ab}{args(a)}{ce}" for k, (n, a) in enumerate(calls)) + se
    if fmt in ("deepseek_v3", "deepseek_v31"):
        sb, se, cb, ce, sep = TOOL_FORMAT_TAGS[fmt]
        if fmt == "deepseek_v3":
            body = "".join(f"{cb}function{sep}{n}\n```json\n{args(a)}\n```{ce}" for n, a in calls)
        else:
            body = "".join(f"{cb}{n}{sep}{args(a)}{ce}" for n, a in calls)
        return sb + body + se
    if fmt == "glm45":
        return "".join(f"\n<tool_call>{n}\n" + "".join(
            f"<arg_key>{k}</arg_key>\n<arg_value>{v if isinstance(v, str) else args(v)}</arg_value>\n"
            for k, v in a.items()) + "</tool_call>" for n, a in calls)
    if fmt == "llama3_json":
        return "; ".join(json.dumps({"name": n, "parameters": a}, ensure_ascii=False) for n, a in calls)
    if fmt == "mistral":
        tc, ar, _ = TOOL_FORMAT_TAGS[fmt]
        return "".join(f"{tc}{n}{ar}{args(a)}" for n, a in calls)
    if fmt == "gpt_oss":
        return "".join(("" if k == 0 else f"{HARMONY_START}assistant")
                       + f"{HARMONY_CHANNEL}commentary to=functions.{n} {HARMONY_CONSTRAIN}json"
                       f"{HARMONY_MESSAGE}{args(a)}{HARMONY_CALL}" for k, (n, a) in enumerate(calls))
    raise ValueError(f"no tool-call format {fmt!r}")


def harmony_analysis(vocab: Vocab) -> tuple[list[int], list[int]]:
    """The ids that open and close a Harmony reasoning (analysis) message and reopen the assistant."""
    opening = encode(vocab, f"{HARMONY_CHANNEL}analysis{HARMONY_MESSAGE}")
    return opening, encode(vocab, f"{HARMONY_END}{HARMONY_START}assistant")


def harmony_final(vocab: Vocab) -> list[int]:
    """The ids that open a Harmony final answer."""
    return encode(vocab, f"{HARMONY_CHANNEL}final{HARMONY_MESSAGE}")


def next_role_stop(fmt: str, vocab: Vocab, *, calls: bool) -> int | None:
    """The id a model of ``fmt`` stops at when it is not the eos (None: it is the eos).

    GLM-4.5 ends a turn at the next message's role token: ``<|observation|>`` after calls (the
    tool results follow), ``<|user|>`` after an answer (its generation config lists both as eos).
    """
    if fmt != "glm45":
        return None
    return vocab.tokenizer.token_to_id("<|observation|>" if calls else "<|user|>")


def answers_a_tool_result_in(fmt: str, input_ids: list[int], vocab: Vocab) -> bool:
    """Whether the prompt's last turn is a tool result (it opens after the last user turn)."""
    marks = _result_and_user(vocab, fmt)
    if marks is None:
        return False
    result, user = marks
    return _last(input_ids, result) > _last(input_ids, user)


def encode(vocab: Vocab, text: str) -> list[int]:
    """``text`` as the served tokenizer's ids (markers become their added tokens)."""
    return list(vocab.tokenizer.encode(text, add_special_tokens=False).ids)


_MARKS: dict[tuple[int, str], tuple[tuple[int, ...], tuple[int, ...]]] = {}  # (id(vocab), fmt) -> ids


def _result_and_user(vocab: Vocab, fmt: str) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    texts = _RESULT_AND_USER.get(fmt)
    if texts is None:
        return None
    key = (id(vocab), fmt)  # a server serves one vocab for its life: encode each marker once
    if key not in _MARKS:
        _MARKS[key] = tuple(encode(vocab, texts[0])), tuple(encode(vocab, texts[1]))
    return _MARKS[key]


def _last(haystack: list[int], needle: tuple[int, ...]) -> int:
    """Index of the last occurrence of ``needle`` (-1 when absent)."""
    found, at = -1, 0
    while (index := find_subsequence(haystack[at:], needle)) is not None:
        found = at + index
        at = found + 1
    return found
