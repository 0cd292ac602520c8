"""A remote-code tokenizer of Kimi-K2's shape, written by the tests themselves (nothing is downloaded).

Like Moonshot's Kimi-K2 / K2.5 repositories, the folder holds a tiktoken-format vocabulary
(``tiktoken.model``: one ``base64(token bytes) rank`` per line), the tokenizer class in a Python
file beside it (``tokenization_kimi.py``, named in ``tokenizer_config.json``'s ``auto_map``), the
special tokens in ``added_tokens_decoder`` (think markers and Kimi's tool-call section markers
included), a ``chat_template.jinja``, and no ``tokenizer.json``. The class does byte-level BPE
over the ranks in pure Python (what tiktoken does, on a tiny vocabulary), so ``tiktoken`` is not
needed; it imports a helper module beside it, as Kimi's does.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

CLASS_NAME = "TikTokenTokenizer"
MODULE = "tokenization_kimi"
MERGES = ("th", "he", "in", "er", "an", "re", "on", "at", "en", "nd", "ou", "is", "or", "es", "ll",
          " t", " a", " w", " s", " i", " o", " c", " h", " the", "the", "ing", " you", " is",
          "hel", "hell", "hello", " hello", "wor", "worl", "world", " world", "\n\n", "  ", "ion")
SPECIAL_TOKENS = ("[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>",
                  "<|im_middle|>", "<think>", "</think>", "<|tool_calls_section_begin|>",
                  "<|tool_calls_section_end|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>",
                  "<|tool_call_end|>", "[UNK]", "[PAD]")

CHAT_TEMPLATE = """\
{%- if tools -%}<|im_system|>tool_declare<|im_middle|>{{ tools | tojson }}<|im_end|>{%- endif -%}
{%- for message in messages -%}
{%- set role = message['role'] -%}
{%- if role == 'user' -%}<|im_user|>user<|im_middle|>
{%- elif role == 'assistant' -%}<|im_assistant|>assistant<|im_middle|>
{%- elif role == 'tool' -%}<|im_system|>tool<|im_middle|>## Return of {{ message.get('tool_call_id', '') }}
{% else -%}<|im_system|>{{ role }}<|im_middle|>
{%- endif -%}
{%- if role == 'assistant' and message.get('reasoning_content') -%}
<think>{{ message['reasoning_content'] }}</think>
{%- endif -%}
{{ message.get('content') or '' }}
{%- if role == 'assistant' and message.get('tool_calls') -%}
<|tool_calls_section_begin|>
{%- for call in message['tool_calls'] -%}
{%- set args = call['function']['arguments'] -%}
<|tool_call_begin|>functions.{{ call['function']['name'] }}:{{ loop.index0 }}<|tool_call_argument_begin|>
{{- args if args is string else args | tojson -}}<|tool_call_end|>
{%- endfor -%}
<|tool_calls_section_end|>
{%- endif -%}
<|im_end|>
{%- endfor -%}
{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>
{%- if thinking is not defined or thinking %}<think>{% endif -%}
{%- endif -%}
"""

HELPER_SOURCE = '''\
"""Byte-level helpers of the tokenizer (Kimi's class imports a module beside it too)."""


def byte_symbols():
    """GPT-2's printable stand-in character for every byte."""
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    extra = [b for b in range(256) if b not in printable]
    codes = printable + [256 + i for i in range(len(extra))]
    return dict(zip(printable + extra, map(chr, codes)))
'''

CLASS_SOURCE = '''\
"""A tiktoken-format BPE tokenizer in pure Python, loaded with trust_remote_code=True."""

import base64
import os
import re

from transformers import PreTrainedTokenizer

from .kimi_bytes import byte_symbols

PIECES = re.compile(r" ?[^\\W\\d_]+| ?\\d{1,3}| ?(?:[^\\w\\s]|_)+|\\s+(?!\\S)|\\s+")


class TikTokenTokenizer(PreTrainedTokenizer):
    vocab_files_names = {"vocab_file": "tiktoken.model"}
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, vocab_file, **kwargs):
        self.ranks = {}
        with open(vocab_file, "rb") as handle:
            for line in handle.read().splitlines():
                if line:
                    token, rank = line.split()
                    self.ranks[base64.b64decode(token)] = int(rank)
        self.by_rank = {rank: token for token, rank in self.ranks.items()}
        self.symbol = byte_symbols()
        self.byte_of = {s: b for b, s in self.symbol.items()}
        super().__init__(**kwargs)

    @property
    def vocab_size(self):
        return len(self.ranks)

    def get_vocab(self):
        vocab = {self._text(token): rank for token, rank in self.ranks.items()}
        vocab.update(self.added_tokens_encoder)
        return vocab

    def _tokenize(self, text, **kwargs):
        out = []
        for piece in PIECES.findall(text):
            parts = [bytes([b]) for b in piece.encode("utf-8")]
            while len(parts) > 1:
                pairs = [(self.ranks.get(parts[i] + parts[i + 1]), i) for i in range(len(parts) - 1)]
                found = [(rank, i) for rank, i in pairs if rank is not None]
                if not found:
                    break
                _, i = min(found)
                parts[i:i + 2] = [parts[i] + parts[i + 1]]
            out.extend(self._text(part) for part in parts)
        return out

    def _text(self, token):
        return "".join(self.symbol[b] for b in token)

    def _convert_token_to_id(self, token):
        return self.ranks.get(bytes(self.byte_of[c] for c in token), self.unk_token_id)

    def _convert_id_to_token(self, index):
        return self._text(self.by_rank[index])

    def convert_tokens_to_string(self, tokens):
        return bytes(self.byte_of[c] for c in "".join(tokens)).decode("utf-8", errors="replace")

    def save_vocabulary(self, save_directory, filename_prefix=None):
        path = os.path.join(save_directory, (filename_prefix or "") + "tiktoken.model")
        with open(path, "wb") as handle:
            for token, rank in sorted(self.ranks.items(), key=lambda item: item[1]):
                handle.write(base64.b64encode(token) + b" " + str(rank).encode() + b"\\n")
        return (path,)
'''


def write_remote_tokenizer(folder: Path) -> Path:
    """Write the tokenizer into ``folder`` (created) and return it.

    Args:
        folder: where the tokenizer's files go.
    """
    folder.mkdir(parents=True, exist_ok=True)
    tokens = [bytes([b]) for b in range(256)] + [m.encode("utf-8") for m in MERGES]
    (folder / "tiktoken.model").write_bytes(b"".join(
        base64.b64encode(token) + b" " + str(rank).encode() + b"\n" for rank, token in enumerate(tokens)))
    (folder / f"{MODULE}.py").write_text(CLASS_SOURCE, encoding="utf-8")
    (folder / "kimi_bytes.py").write_text(HELPER_SOURCE, encoding="utf-8")
    (folder / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")
    added = {str(len(tokens) + i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                    "single_word": False, "special": True}
             for i, t in enumerate(SPECIAL_TOKENS)}
    config = {"added_tokens_decoder": added, "auto_map": {"AutoTokenizer": [f"{MODULE}.{CLASS_NAME}", None]},
              "bos_token": "[BOS]", "eos_token": "[EOS]", "pad_token": "[PAD]", "unk_token": "[UNK]",
              "additional_special_tokens": [t for t in SPECIAL_TOKENS if t.startswith("<")],
              "model_max_length": 1048576, "tokenizer_class": CLASS_NAME,
              "clean_up_tokenization_spaces": False}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return folder
