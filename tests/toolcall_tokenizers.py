"""Tokenizers of each tool-call family, written by the tests: the demo BPE plus the family's markers.

Each family's folder holds the demo tokenizer's byte-level BPE with the family's markers added
as special tokens (so they are single ids, as in the real vocabularies) and a chat template
written after the family's published format: how the offered tools are declared, how an
assistant turn's calls, a tool result and the generation prompt are rendered. The declarations
follow each published template's structure (the wording is ours): Kimi-K2's ``tool_declare``
message holding a JSON list; a ``<tools>`` block of JSON lines in DeepSeek-V3's system prompt
(vLLM's tool template) and GLM-4.5's system message; DeepSeek-V3.1's ``## Tools`` section with a
``### name`` and ``Parameters:`` per tool; Llama 3.x's indented JSON definitions in the first user
message; Mistral's ``[AVAILABLE_TOOLS]`` list before the last user message; gpt-oss's TypeScript
``namespace functions`` in the developer message. The stand-in reads each back to name a call.

``hermes`` is the demo tokenizer itself (Qwen3's template).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tokenizers import AddedToken, Tokenizer

from eaglefeed.devtools.demo import TOKENIZER_DIR

ARGS = ("{%- set args = tc.function.arguments -%}"
        "{%- set args_json = args if args is string else args | tojson -%}")

KIMI = """
{%- if tools -%}<|im_system|>tool_declare<|im_middle|>{{ tools | tojson(separators=(',', ':')) }}<|im_end|>
{%- endif -%}
{%- for m in messages -%}
{%- if m.role == 'user' -%}<|im_user|>user<|im_middle|>{{ m.content }}<|im_end|>
{%- elif m.role == 'system' -%}<|im_system|>system<|im_middle|>{{ m.content }}<|im_end|>
{%- elif m.role == 'tool' -%}<|im_system|>tool<|im_middle|>## Return of {{ m.tool_call_id or '' }}
{{ m.content }}<|im_end|>
{%- else -%}<|im_assistant|>assistant<|im_middle|>
{%- if m.reasoning_content -%}<think>{{ m.reasoning_content }}</think>{%- endif -%}
{{ m.content or '' }}
{%- if m.tool_calls -%}<|tool_calls_section_begin|>
{%- for tc in m.tool_calls -%}""" + ARGS + """<|tool_call_begin|>\
functions.{{ tc.function.name }}:{{ loop.index0 }}<|tool_call_argument_begin|>{{ args_json }}<|tool_call_end|>
{%- endfor -%}<|tool_calls_section_end|>
{%- endif -%}<|im_end|>
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>{%- endif -%}
"""


# DeepSeek-V3 (vLLM's tool template): a <tools> block of JSON lines in the system prompt.
DEEPSEEK_V3_TOOLS = """{{ '\\n\\n' }}# Tools

These functions can be called; their schemas are inside <tools></tools>:
<tools>
{%- for t in tools %}{{ '\\n' + t | tojson }}{% endfor %}{{ '\\n' }}</tools>

Write each call as the word function, the name, then its arguments as fenced JSON."""
# DeepSeek-V3.1 (its model card): a ## Tools section, a ### heading per tool, then its format rules.
DEEPSEEK_V31_TOOLS = """{{ '\\n\\n' }}## Tools
These tools are available:
{% for t in tools %}{{ '\\n' }}### {{ t.function.name }}
Description: {{ t.function.description or '' }}

Parameters: {{ (t.function.parameters or {}) | tojson }}
{% endfor %}{{ '\\n' }}IMPORTANT: call a tool by its exact name, with JSON arguments that follow its \
Parameters."""


def _deepseek(tools: str, call: str) -> str:
    return """<｜begin▁of▁sentence｜>
{%- set ns = namespace(system='', outputs=false) -%}
{%- for m in messages if m.role == 'system' -%}{%- set ns.system = ns.system + m.content -%}{%- endfor -%}
{{ ns.system }}{%- if tools %}""" + tools + """{%- endif -%}
{%- for m in messages -%}
{%- if m.role != 'tool' and ns.outputs -%}<｜tool▁outputs▁end｜>{%- set ns.outputs = false -%}{%- endif -%}
{%- if m.role == 'user' -%}<｜User｜>{{ m.content }}
{%- elif m.role == 'assistant' -%}<｜Assistant｜>
{%- if m.reasoning_content -%}<think>{{ m.reasoning_content }}</think>{%- endif -%}
{{ m.content or '' }}
{%- if m.tool_calls -%}<｜tool▁calls▁begin｜>
{%- for tc in m.tool_calls -%}""" + ARGS + call + """{%- endfor -%}<｜tool▁calls▁end｜>
{%- endif -%}<｜end▁of▁sentence｜>
{%- elif m.role == 'tool' -%}
{%- if not ns.outputs -%}<｜tool▁outputs▁begin｜>{%- set ns.outputs = true -%}{%- endif -%}
<｜tool▁output▁begin｜>{{ m.content }}<｜tool▁output▁end｜>
{%- endif -%}
{%- endfor -%}
{%- if ns.outputs -%}<｜tool▁outputs▁end｜>{%- endif -%}
{%- if add_generation_prompt -%}<｜Assistant｜>{%- endif -%}
"""


DEEPSEEK_V3 = _deepseek(DEEPSEEK_V3_TOOLS, "<｜tool▁call▁begin｜>function<｜tool▁sep｜>{{ tc.function.name }}"
                        "\n```json\n{{ args_json }}\n```<｜tool▁call▁end｜>")
DEEPSEEK_V31 = _deepseek(DEEPSEEK_V31_TOOLS, "<｜tool▁call▁begin｜>{{ tc.function.name }}<｜tool▁sep｜>"
                         "{{ args_json }}<｜tool▁call▁end｜>")

GLM45 = """[gMASK]<sop>
{%- if tools -%}<|system|>
# Tools

You may call the functions whose signatures are inside <tools></tools>:
<tools>
{% for t in tools %}{{ t | tojson(ensure_ascii=False) }}
{% endfor %}</tools>

Write each call as a tool_call element: the name, then one arg_key and arg_value pair a line.
{%- endif -%}
{%- for m in messages -%}
{%- if m.role == 'user' -%}<|user|>
{{ m.content }}
{%- elif m.role == 'system' -%}<|system|>
{{ m.content }}
{%- elif m.role == 'assistant' -%}<|assistant|>
{{- '\n<think>' + m.reasoning_content + '</think>' if m.reasoning_content else '' }}
{{ m.content or '' }}
{%- for tc in m.tool_calls or [] -%}
{%- set args = tc.function.arguments if tc.function.arguments is mapping else {} %}
<tool_call>{{ tc.function.name }}
{% for k, v in args.items() -%}<arg_key>{{ k }}</arg_key>
<arg_value>{{ v if v is string else v | tojson(ensure_ascii=False) }}</arg_value>
{% endfor -%}</tool_call>
{%- endfor -%}
{%- elif m.role == 'tool' -%}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}<|observation|>{%- endif %}
<tool_response>
{{ m.content }}
</tool_response>
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<|assistant|>{%- endif -%}
"""

# Llama 3.x (JSON tools): the definitions, indented JSON, open the first user message.
LLAMA3 = """<|begin_of_text|>
{%- set ns = namespace(system='', first=true) -%}
{%- for m in messages if m.role == 'system' -%}{%- set ns.system = ns.system + m.content -%}{%- endfor -%}
<|start_header_id|>system<|end_header_id|>

{{ ns.system }}<|eot_id|>
{%- for m in messages -%}
{%- if m.role == 'user' -%}<|start_header_id|>user<|end_header_id|>

{% if tools and ns.first -%}
Answer with one JSON function call, {"name": function name, "parameters": its arguments}, if one of \
these functions helps.

{% for t in tools %}{{ t | tojson(indent=4) }}

{% endfor %}{% endif %}{%- set ns.first = false -%}{{ m.content }}<|eot_id|>
{%- elif m.role == 'assistant' -%}<|start_header_id|>assistant<|end_header_id|>

{{ m.content or '' }}
{%- for tc in m.tool_calls or [] -%}""" + ARGS + """{"name": "{{ tc.function.name }}", \
"parameters": {{ args_json }}}
{%- if not loop.last %}; {% endif -%}
{%- endfor -%}<|eot_id|>
{%- elif m.role == 'tool' -%}<|start_header_id|>ipython<|end_header_id|>

{{ m.content }}<|eot_id|>
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<|start_header_id|>assistant<|end_header_id|>

{% endif -%}
"""

# Mistral: the JSON list of tools right before the last user message.
MISTRAL = """<s>
{%- set ns = namespace(last=-1) -%}
{%- for m in messages -%}
{%- if m.role == 'user' -%}{%- set ns.last = loop.index0 -%}{%- endif -%}
{%- endfor -%}
{%- for m in messages if m.role == 'system' -%}[SYSTEM_PROMPT]{{ m.content }}[/SYSTEM_PROMPT]{%- endfor -%}
{%- for m in messages -%}
{%- if m.role == 'user' -%}
{%- if tools and loop.index0 == ns.last -%}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]
{%- endif -%}
[INST]{{ m.content }}[/INST]
{%- elif m.role == 'assistant' -%}{{ m.content or '' }}
{%- for tc in m.tool_calls or [] -%}""" + ARGS + """[TOOL_CALLS]{{ tc.function.name }}[ARGS]{{ args_json }}
{%- endfor -%}</s>
{%- elif m.role == 'tool' -%}[TOOL_RESULTS]{{ m.content }}[/TOOL_RESULTS]
{%- endif -%}
{%- endfor -%}
"""

# gpt-oss (Harmony): the tools as TypeScript types in the developer message, which also takes the
# leading system message as its instructions.
TS_TYPE = """{%- macro ts_type(spec) -%}
{%- if spec.enum -%}{{ spec.enum | map('tojson') | join(' | ') }}
{%- elif spec.type == 'string' -%}string
{%- elif spec.type == 'number' or spec.type == 'integer' -%}number
{%- elif spec.type == 'boolean' -%}boolean
{%- elif spec.type == 'array' -%}{{ ts_type(spec.get('items') or {}) }}[]
{%- elif spec.type == 'object' and spec.properties -%}{
{% for k, v in spec.properties.items() -%}
{{ k }}{{ '' if k in (spec.required or []) else '?' }}: {{ ts_type(v) }}{{ ', ' if not loop.last else '' }}
{%- endfor -%}}
{%- elif spec.type == 'object' -%}object
{%- else -%}any
{%- endif -%}
{%- endmacro -%}
{%- macro functions_namespace() -%}
# Tools

## functions

namespace functions {

{% for t in tools -%}
{% set fn = t.function -%}
// {{ fn.description or '' }}
{% set props = (fn.parameters or {}).get('properties') or {} -%}
{%- if props -%}
type {{ fn.name }} = (_: {
{% for k, v in props.items() -%}
{%- if v.description %}// {{ v.description }}
{% endif -%}
{{ k }}{{ '' if k in (fn.parameters.required or []) else '?' }}: {{ ts_type(v) }},
{% endfor -%}
}) => any;
{%- else -%}
type {{ fn.name }} = () => any;
{%- endif -%}
{{ '\\n\\n' }}
{%- endfor -%}
} // namespace functions
{%- endmacro -%}"""

GPT_OSS = TS_TYPE + """<|start|>system<|message|>You are a helpful assistant.
Reasoning: medium<|end|>
{%- set rest = messages[1:] if messages and messages[0].role == 'system' else messages -%}
{%- set instructions = messages[0].content if messages and messages[0].role == 'system' else '' -%}
{%- if instructions or tools -%}<|start|>developer<|message|>
{%- if instructions -%}# Instructions

{{ instructions }}{%- endif -%}
{{ '\n\n' if instructions and tools else '' }}
{%- if tools -%}{{ functions_namespace() }}{%- endif -%}<|end|>
{%- endif -%}
{%- for m in rest -%}
{%- if m.role == 'user' or m.role == 'system' -%}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>
{%- elif m.role == 'assistant' -%}
{%- if m.reasoning_content -%}<|start|>assistant<|channel|>analysis<|message|>{{ m.reasoning_content }}<|end|>
{%- endif -%}
{%- if m.content -%}<|start|>assistant<|channel|>{{ 'commentary' if m.tool_calls else 'final' }}<|message|>\
{{ m.content }}<|end|>
{%- endif -%}
{%- for tc in m.tool_calls or [] -%}""" + ARGS + """<|start|>assistant<|channel|>commentary to=functions.\
{{ tc.function.name }} <|constrain|>json<|message|>{{ args_json }}<|call|>
{%- endfor -%}
{%- elif m.role == 'tool' -%}<|start|>functions.{{ m.name or 'tool' }} to=assistant<|channel|>commentary\
<|message|>{{ m.content }}<|end|>
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<|start|>assistant{%- endif -%}
"""

THINK = ("<think>", "</think>")
FAMILIES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...], str]] = {
    # name: (template, special tokens (eos first), plain added tokens, eos)
    "kimi_k2": (KIMI, ("<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>",
                       *THINK, "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>",
                       "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"), (), ""),
    "deepseek_v3": (DEEPSEEK_V3, (), (), ""),
    "deepseek_v31": (DEEPSEEK_V31, (), (), ""),
    "glm45": (GLM45, ("<|endoftext|>", "[gMASK]", "<sop>", "<|system|>", "<|user|>", "<|assistant|>",
                      "<|observation|>", *THINK, "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>",
                      "<arg_value>", "</arg_value>", "<tool_response>", "</tool_response>"), (), ""),
    "llama3_json": (LLAMA3, ("<|eot_id|>", "<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
                             "<|eom_id|>", "<|python_tag|>"), (), ""),
    "mistral": (MISTRAL, ("</s>", "<s>", "[INST]", "[/INST]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]",
                          "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]", "[/TOOL_RESULTS]",
                          "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"), (), ""),
    "gpt_oss": (GPT_OSS, ("<|return|>", "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>",
                          "<|call|>"), ("analysis",), ""),
}
_DEEPSEEK_TOKENS = ("<｜end▁of▁sentence｜>", "<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>",
                    *THINK, "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",
                    "<｜tool▁call▁end｜>",
                    "<｜tool▁sep｜>", "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>",
                    "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>")
for _name in ("deepseek_v3", "deepseek_v31"):
    FAMILIES[_name] = (FAMILIES[_name][0], _DEEPSEEK_TOKENS, (), "")
FORMAT_NAMES = ("hermes", *FAMILIES)


def write_family_tokenizer(fmt: str, folder: Path) -> Path:
    """Write the tokenizer of ``fmt`` into ``folder`` (created) and return it; ``hermes``: the demo's copy."""
    folder.mkdir(parents=True, exist_ok=True)
    if fmt == "hermes":
        for path in TOKENIZER_DIR.iterdir():
            shutil.copy(path, folder / path.name)
        return folder
    template, special, plain, _ = FAMILIES[fmt]
    tok = Tokenizer.from_file(str(TOKENIZER_DIR / "tokenizer.json"))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    if plain:
        tok.add_tokens([AddedToken(t, special=False, normalized=False, single_word=False) for t in plain])
    tok.save(str(folder / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": False, "add_eos_token": False,
              "bos_token": None, "eos_token": special[0], "pad_token": "<|endoftext|>", "unk_token": None,
              "additional_special_tokens": list(special), "clean_up_tokenization_spaces": False,
              "model_max_length": 32768}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False, indent=1),
                                                  encoding="utf-8")
    (folder / "chat_template.jinja").write_text(template, encoding="utf-8")
    return folder
