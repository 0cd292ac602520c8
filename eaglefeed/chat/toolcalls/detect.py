"""``--tool-format auto``: which tool-call format a tokenizer's model writes, from its vocab and template.

The added tokens name most families (Kimi's section markers, DeepSeek's full-width tags, GLM's
``<arg_key>``, Mistral's ``[TOOL_CALLS]``, Harmony's ``<|channel|>``); the chat template settles
the rest (DeepSeek-V3's JSON fence against V3.1's bare arguments, Llama's ``"parameters"``). When
neither tells, the answer is None and the caller decides: a run whose data has tools stops.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from eaglefeed.core.tokenizer import HARMONY_CALL, HARMONY_CHANNEL, TOOL_FORMAT_TAGS

AUTO = "auto"

_DEEPSEEK_CALLS = TOOL_FORMAT_TAGS["deepseek_v3"][0]
_DEEPSEEK_SEP = TOOL_FORMAT_TAGS["deepseek_v3"][4]


@dataclass(frozen=True)
class Detected:
    """What ``auto`` found: the format's name (None when it cannot tell) and why, for the log."""

    name: str | None
    why: str


def detect_format(tokenizer: Any) -> Detected:
    """The tool-call format of a loaded Hugging Face tokenizer's model.

    Args:
        tokenizer: has ``get_added_vocab()`` and ``chat_template`` (a string, a dict of named
            templates, or None).

    Returns:
        the format and the evidence, or ``Detected(None, why)``.
    """
    added = set(tokenizer.get_added_vocab())
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = "\n".join(str(t) for t in template.values())
    return detect_from(added, template if isinstance(template, str) else "")


def detect_from(added: Collection[str], template: str) -> Detected:
    """:func:`detect_format` on the added tokens' spellings and the chat template's text.

    The template is asked first (it is what writes the calls into history); then the added tokens
    (a tokenizer may carry markers of a base model its template no longer writes).
    """
    found = _from_template(template)
    if found is not None:
        return found
    for name, spelling in _VOCAB_SIGNS:
        if spelling in added:
            if name == "deepseek":
                return Detected(None, f"added token {spelling} but no template tells DeepSeek-V3 from V3.1")
            if name == "gpt_oss" and HARMONY_CALL not in added:
                continue
            return Detected(name, f"added token {spelling}")
    if "tool" not in template:
        return Detected("none", "the chat template renders no tools")
    return Detected(None, "no known tool-call marker in the added tokens or the chat template")


_VOCAB_SIGNS = (("gpt_oss", HARMONY_CHANNEL), ("kimi_k2", TOOL_FORMAT_TAGS["kimi_k2"][0]),
                ("deepseek", _DEEPSEEK_CALLS), ("glm45", "<arg_key>"), ("mistral", "[TOOL_CALLS]"),
                ("llama3_json", "<|python_tag|>"), ("hermes", "<tool_call>"))


def _from_template(template: str) -> Detected | None:
    if HARMONY_CHANNEL in template and "to=functions" in template:
        return Detected("gpt_oss", "chat template writes <|channel|>... to=functions. messages")
    if TOOL_FORMAT_TAGS["kimi_k2"][0] in template:
        return Detected("kimi_k2", f"chat template writes {TOOL_FORMAT_TAGS['kimi_k2'][0]}")
    if _DEEPSEEK_CALLS in template or _DEEPSEEK_SEP in template:
        # V3 fences the arguments (NAME\n```json\n{...}\n```); V3.1 writes them bare.
        fenced = "```json" in template
        return Detected("deepseek_v3" if fenced else "deepseek_v31",
                        f"chat template writes {_DEEPSEEK_SEP} calls {'with' if fenced else 'without'} "
                        "a ```json fence")
    for name, spelling in (("glm45", "<arg_key>"), ("mistral", "[TOOL_CALLS]")):
        if spelling in template:
            return Detected(name, f"chat template writes {spelling}")
    if "<function=" in template:  # Qwen3-Coder's XML calls share <tool_call> but are not Hermes
        return Detected(None, "chat template writes <function=...> calls (no parser here)")
    if "<tool_call>" in template:
        return Detected("hermes", "chat template writes <tool_call>")
    if "<|python_tag|>" in template or ('"parameters": ' in template and "<|start_header_id|>" in template):
        return Detected("llama3_json", 'chat template writes {"name": ..., "parameters": ...} calls')
    return None
