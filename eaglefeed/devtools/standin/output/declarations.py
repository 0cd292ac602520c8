"""How each family's chat template declares the tools a prompt offers, and a reader of each way.

A TEST DOUBLE's reading, not a parser the pipeline uses: the stand-in names an offered tool in a
call, so it reads the declaration back from the prompt's text. Each family's published template
declares tools its own way (:data:`DECLARATIONS`, keyed by ``--tool-call-format``):

* Hermes/Qwen: a ``<tools>`` block in the system turn, one JSON schema a line.
* GLM-4.5: the same block in a ``<|system|>`` message before the first user turn.
* DeepSeek-V3 (vLLM's tool template): the block in the system prompt before ``<｜User｜>``.
  DeepSeek-V3.1: a ``## Tools`` section there, one ``### name`` heading a tool with its
  ``Parameters: {json}`` (the model card), or the tools' JSON one after another (vLLM's template).
* Kimi-K2: a ``<|im_system|>tool_declare<|im_middle|>`` message holding one JSON list.
* Mistral: ``[AVAILABLE_TOOLS]`` JSON list ``[/AVAILABLE_TOOLS]`` before the last user message.
* Llama 3.x (JSON tools): indented JSON definitions in the first user (or the system) message.
* gpt-oss (Harmony): TypeScript in the developer message: ``namespace functions {``, each tool a
  ``// description`` and ``type name = (_: { arg?: type, ... }) => any;``.

A reader gets the text from a declaration's opening up to its closing and returns the tools it
lists (empty when a declaration is there but lists nothing readable), or None when the text holds
no declaration at all.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from eaglefeed.core.tokenizer import HARMONY_END, HARMONY_MESSAGE, HARMONY_START


@dataclass(frozen=True)
class OfferedTool:
    """A tool the prompt offers: its function name, its parameters' names and their JSON types.

    ``types`` lines up with ``params`` (``""``: the declaration does not say; missing: none do).
    """

    name: str
    params: tuple[str, ...]
    types: tuple[str, ...] = ()


Reader = Callable[[str], tuple[OfferedTool, ...] | None]


@dataclass(frozen=True)
class Declaration:
    """Where one family's template declares its tools, and how to read them.

    Attributes:
        opens: texts that open the span (the first found is taken); empty: the prompt's start.
        closes: texts that end it (the first found after the opening); none found: the prompt's end.
        read: the text from the opening up to the closing → the tools, or None when it declares none.
    """

    opens: tuple[str, ...]
    closes: tuple[str, ...]
    read: Reader


_DECODER = json.JSONDecoder()
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_TYPE = re.compile(r"type (\S+) = (\(\) => any;|\(_: \{)")
_PARAM = re.compile(r"([^\s?:]+)\??:\s*(.*?),?$")
_HEADING = re.compile(r"^### (\S+)[ \t]*$", re.MULTILINE)


def read_json_tools(text: str) -> tuple[OfferedTool, ...]:
    """The tool definitions among the JSON objects in ``text`` (lines, a list, or back to back).

    Each top-level object that is an OpenAI tool (``{"type": "function", "function": {...}}``)
    or a bare function (``name`` with ``parameters`` or ``description``) is one tool.
    """
    return _json_tools(text)


def read_tools_block(text: str) -> tuple[OfferedTool, ...] | None:
    """The tools of every ``<tools>`` ... ``</tools>`` block in ``text``; None without one.

    Qwen's instructions mention an empty ``<tools></tools>`` before the block itself.
    """
    if "<tools>" not in text:
        return None
    blocks = (part.split("</tools>", 1)[0] for part in text.split("<tools>")[1:])
    return tuple(tool for block in blocks for tool in _json_tools(block))


def read_system_tools(text: str) -> tuple[OfferedTool, ...] | None:
    """DeepSeek's system prompt: a ``<tools>`` block (V3) or a ``## Tools`` section (V3.1)."""
    block = read_tools_block(text)
    return block if block is not None else read_tools_section(text)


@functools.lru_cache(maxsize=256)
def read_tools_section(text: str) -> tuple[OfferedTool, ...] | None:
    """DeepSeek-V3.1's ``## Tools`` section, up to its ``IMPORTANT:`` format rules; None without one.

    One ``### name`` heading per tool with a ``Parameters: {json}`` line; without headings, the
    tools' JSON objects one after another.
    """
    at = text.find("## Tools")
    if at < 0:
        return None
    section = text[at:].split("\nIMPORTANT:", 1)[0]
    headings = list(_HEADING.finditer(section))
    if not headings:
        return _json_tools(section)
    tools = []
    for k, heading in enumerate(headings):
        body = section[heading.end():headings[k + 1].start() if k + 1 < len(headings) else len(section)]
        params: Any = None
        found = body.find("Parameters:")
        if found >= 0:
            params = next(_json_values(body[found + len("Parameters:"):]), None)
        tools.append(OfferedTool(heading[1], *_properties(params)))
    return tuple(tools)


def read_json_definitions(text: str) -> tuple[OfferedTool, ...] | None:
    """Llama 3.x: JSON tool definitions in the system or first user message; None without any."""
    return _json_tools(text) or None


@functools.lru_cache(maxsize=256)
def read_namespace(text: str) -> tuple[OfferedTool, ...] | None:
    """Harmony's ``namespace functions { ... }``: each ``type name = (...) => any;``; None without it.

    A parameter is a name at the top level of the tool's ``{ }`` (``name?: type``); comments and
    string literals are dropped before braces are counted, so a nested object's fields are not
    taken for parameters.
    """
    opening = "namespace functions {"
    at = text.find(opening)
    if at < 0:
        return None
    body = text[at + len(opening):].split("} // namespace functions", 1)[0]
    tools: list[OfferedTool] = []
    params: list[str] = []
    types: list[str] = []
    name, depth = "", 0
    for raw in body.splitlines():
        line = _STRING.sub('""', raw).split("//", 1)[0].strip()
        if not line:
            continue
        if depth == 0:
            found = _TYPE.match(line)
            if found is None:
                continue
            if found[2].startswith("()"):
                tools.append(OfferedTool(found[1], ()))
            else:
                name, params, types, depth = found[1], [], [], 1
            continue
        if depth == 1 and (param := _PARAM.match(line)) is not None:
            params.append(param[1])
            types.append(_typescript_type(param[2]))
        depth += line.count("{") - line.count("}")
        if depth <= 0:
            tools.append(OfferedTool(name, tuple(params), tuple(types)))
            depth = 0
    return tuple(tools)


_DEEPSEEK_USER = "<\uff5cUser\uff5c>"
_DEEPSEEK_ASSISTANT = "<\uff5cAssistant\uff5c>"
_DEEPSEEK = Declaration((), (_DEEPSEEK_USER, _DEEPSEEK_ASSISTANT), read_system_tools)

DECLARATIONS: dict[str, Declaration] = {
    # <tools> is plain text in Qwen's vocabulary: its ids depend on the text before it.
    "hermes": Declaration(("<tools>", " <tools>"), ("<|im_end|>",), read_tools_block),
    "glm45": Declaration((), ("<|user|>", "<|assistant|>", "<|observation|>"), read_tools_block),
    "deepseek_v3": _DEEPSEEK,
    "deepseek_v31": _DEEPSEEK,
    "kimi_k2": Declaration(("<|im_system|>tool_declare<|im_middle|>",), ("<|im_end|>",), read_json_tools),
    "mistral": Declaration(("[AVAILABLE_TOOLS]",), ("[/AVAILABLE_TOOLS]",), read_json_tools),
    "llama3_json": Declaration(("<|start_header_id|>",), ("<|start_header_id|>assistant<|end_header_id|>",),
                               read_json_definitions),
    "gpt_oss": Declaration((f"{HARMONY_START}developer{HARMONY_MESSAGE}",), (HARMONY_END,), read_namespace),
}


@functools.lru_cache(maxsize=256)
def _json_tools(text: str) -> tuple[OfferedTool, ...]:
    return tuple(tool for value in _json_values(text) if (tool := _tool(value)) is not None)


def _json_values(text: str) -> Iterator[Any]:
    """Each top-level JSON object in ``text``, in order (text that does not parse is skipped)."""
    at = 0
    while (start := text.find("{", at)) >= 0:
        try:
            value, at = _DECODER.raw_decode(text, start)
        except ValueError:
            at = start + 1
            continue
        yield value


def _tool(value: Any) -> OfferedTool | None:
    if not isinstance(value, dict):
        return None
    wrapped = value.get("function")
    fn = wrapped if isinstance(wrapped, dict) else value
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        return None
    if fn is value and "parameters" not in fn and "description" not in fn:
        return None  # a bare {"name": ...} is not taken for a definition
    return OfferedTool(name, *_properties(fn.get("parameters")))


def _properties(params: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A JSON schema's property names and their ``type`` (``""`` when not one string)."""
    props = params.get("properties") if isinstance(params, dict) else None
    if not isinstance(props, dict):
        return (), ()
    types = (spec.get("type") if isinstance(spec, dict) else None for spec in props.values())
    return tuple(props), tuple(t if isinstance(t, str) else "" for t in types)


def _typescript_type(text: str) -> str:
    """The JSON type a Harmony parameter's TypeScript type stands for (``""``: any or a union)."""
    if text.startswith("{") or text == "object":
        return "object"
    if text.endswith("[]"):
        return "array"
    if text.startswith('"') or text == "string":
        return "string"  # a string enum's literals (blanked before this)
    return text if text in ("number", "boolean") else ""
