"""The stand-in reads the offered tools back however each family's template declares them.

Per family, random tools are rendered by that family's template (tests/toolcall_tokenizers.py,
declared as the published template does) and read back from the prompt's ids; the readers of
``eaglefeed.devtools.standin.output.declarations`` are also checked on their own text.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from eaglefeed.devtools.standin.output.declarations import (
    OfferedTool,
    read_json_tools,
    read_namespace,
    read_tools_block,
    read_tools_section,
)
from eaglefeed.devtools.standin.output.tools import declared_tools
from eaglefeed.devtools.standin.vocab import load_vocab
from tests.toolcall_tokenizers import FORMAT_NAMES, write_family_tokenizer

_TYPES = ("string", "integer", "number", "boolean", "array", "object")
_name = st.from_regex(r"[a-z][a-z0-9_]{0,11}", fullmatch=True)
# One line of prose; braces and slashes included (Harmony's comments must not count as braces).
_description = st.text(st.sampled_from("abc XYZ{}/,.:é"), max_size=20).map(str.strip)


@st.composite
def _tools(draw: st.DrawFn) -> list[dict[str, Any]]:
    names = draw(st.lists(_name, min_size=1, max_size=3, unique=True))
    tools = []
    for name in names:
        params = draw(st.dictionaries(_name, st.sampled_from(_TYPES), max_size=4))
        props: dict[str, Any] = {}
        for param, kind in params.items():
            spec: dict[str, Any] = {"type": kind, "description": draw(_description)}
            if kind == "array":
                spec["items"] = {"type": "string"}
            if kind == "object" and draw(st.booleans()):
                spec["properties"] = {"inner": {"type": "string"}, "depth": {"type": "integer"}}
            props[param] = spec
        parameters = {"type": "object", "properties": props}
        tools.append({"type": "function", "function": {"name": name, "description": draw(_description),
                                                        "parameters": parameters}})
    return tools


@pytest.fixture(scope="module")
def families(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Any]]:
    root: Path = tmp_path_factory.mktemp("declarations")
    out = {}
    for fmt in FORMAT_NAMES:
        folder = write_family_tokenizer(fmt, root / fmt)
        out[fmt] = (AutoTokenizer.from_pretrained(str(folder)), load_vocab(folder))
    return out


def _prompt(tok: Any, tools: list[dict[str, Any]] | None) -> list[int]:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Plan it."}]
    text = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False)
    return list(tok(text, add_special_tokens=False)["input_ids"])


def _expected(fmt: str, tools: list[dict[str, Any]]) -> tuple[OfferedTool, ...]:
    def kind(spec: dict[str, Any]) -> str:
        # Harmony's TypeScript has one number type
        return "number" if fmt == "gpt_oss" and spec["type"] == "integer" else spec["type"]

    return tuple(OfferedTool(t["function"]["name"], tuple(props := t["function"]["parameters"]["properties"]),
                             tuple(kind(spec) for spec in props.values())) for t in tools)


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
@settings(max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tools=_tools())
def test_every_familys_declaration_reads_back(fmt, families, tools):
    tok, vocab = families[fmt]
    assert declared_tools(_prompt(tok, tools), vocab, fmt) == _expected(fmt, tools)


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_a_prompt_without_tools_declares_none(fmt, families):
    tok, vocab = families[fmt]
    assert declared_tools(_prompt(tok, None), vocab, fmt) is None


def test_harmony_types_nest_and_comments_hold_no_braces():
    text = """# Tools

## functions

namespace functions {

// Finds {things} // really
type find = (_: {
// where to look {
where?: {
inner?: string, depth: number},
tags: string[],
mode?: "a{" | "b", // default: "a{"
}) => any;

type noop = () => any;

} // namespace functions"""
    find = OfferedTool("find", ("where", "tags", "mode"), ("object", "array", "string"))
    assert read_namespace(text) == (find, OfferedTool("noop", ()))
    assert read_namespace("# Instructions\n\nBe brief.") is None


def test_deepseek_sections_with_headings_or_bare_json():
    section = ("Be brief.\n\n## Tools\nThese tools are available:\n\n### get_weather\nDescription: {odd}\n\n"
               'Parameters: {"type": "object", "properties": {"city": {"type": "string"}}}\n\n'
               "### now\nDescription: the time\n\nParameters: {}\n\nIMPORTANT: use them well.")
    assert read_tools_section(section) == (OfferedTool("get_weather", ("city",), ("string",)),
                                           OfferedTool("now", ()))
    bare = '## Tools\nYou have access to the following tools:\n{"name": "now", "description": "t"}IMPORTANT:'
    assert read_tools_section(bare) == (OfferedTool("now", ()),)
    assert read_tools_section("Be brief.") is None


def test_json_reading_skips_what_is_not_a_definition():
    text = ('Reply as {"name": function name}. {"name": "bare"} {"type": "function", "function": '
            '{"name": "ok", "parameters": {"properties": {"a": {"type": ["string", "null"]}}}}} {broken')
    assert read_json_tools(text) == (OfferedTool("ok", ("a",), ("",)),)
    assert read_tools_block("listed in <tools></tools>:\n<tools>\n" + text + "\n</tools>") == (
        OfferedTool("ok", ("a",), ("",)),)
    assert read_tools_block("no block here") is None
