"""``produce --tool-format``: a conversation run records the format in each lane's state, and stops on a
tool conversation when ``auto`` cannot tell the tokenizer's format."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from eaglefeed.chat.conversation import ConversationState
from eaglefeed.core.config import PromptSettings
from eaglefeed.core.errors import ConfigError
from eaglefeed.producers.build import PromptBuilder
from eaglefeed.producers.sources import SourceRow
from eaglefeed.schemas import PROMPT
from tests.toolcall_tokenizers import write_family_tokenizer

TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
TOOL_ROW = {"id": "t", "tools": [TOOL], "messages": [{"role": "user", "content": "go"}]}
PLAIN_ROW = {"id": "p", "messages": [{"role": "user", "content": "hi"}]}


def _build(folder: Path, row: dict, **settings: object) -> tuple[PromptBuilder, list]:
    builder = PromptBuilder(PromptSettings(tokenizer=str(folder), history="rerender", **settings), fast=False)
    result = builder.build([SourceRow(source="in.jsonl", line=1, raw=json.dumps(row).encode())])
    return builder, result.prompts


def _state(prompts: list) -> ConversationState:
    return ConversationState.from_json(PROMPT.decode(prompts[0][1])["conversation"])


@pytest.fixture(scope="module")
def families(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fmt")
    for fmt in ("kimi_k2", "deepseek_v31"):
        write_family_tokenizer(fmt, root / fmt)
    # DeepSeek's markers with a template that writes no calls: V3 and V3.1 cannot be told apart
    shutil.copytree(root / "deepseek_v31", root / "unknown")
    (root / "unknown" / "chat_template.jinja").write_text(
        "{% for m in messages %}{{ m.content }}{% endfor %}{% if tools %}{{ tools | tojson }}{% endif %}")
    return root


def test_auto_records_what_the_tokenizer_tells(families):
    _, prompts = _build(families / "kimi_k2", TOOL_ROW)
    assert _state(prompts).tool_format == "kimi_k2"


def test_a_named_format_is_recorded_as_given(families):
    _, prompts = _build(families / "kimi_k2", TOOL_ROW, tool_format="hermes")
    assert _state(prompts).tool_format == "hermes"


def test_a_tool_conversation_stops_the_run_when_auto_cannot_tell(families):
    builder, prompts = _build(families / "unknown", PLAIN_ROW)  # no tools: goes ahead
    assert builder.tool_format is not None and builder.tool_format.name is None
    assert _state(prompts).tool_format == ""
    with pytest.raises(ConfigError, match=r"cannot tell the tool-call format .* pass --tool-format") as err:
        _build(families / "unknown", TOOL_ROW)
    assert "\n" not in str(err.value)


def test_original_history_chooses_nothing(families):
    builder = PromptBuilder(PromptSettings(tokenizer=str(families / "unknown")), fast=False)
    assert builder.tool_format is None
