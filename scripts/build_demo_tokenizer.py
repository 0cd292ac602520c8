"""Build the deterministic demo byte-level BPE tokenizer in eaglefeed/devtools/demo/tokenizer."""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

from eaglefeed.devtools.demo import SPECIAL_TOKENS

OUT_DIR = Path(__file__).resolve().parents[1] / "eaglefeed" / "devtools" / "demo" / "tokenizer"
VOCAB_SIZE = 4096
SEED = 20240601
# Special tokens take ids 0..8 in the order of SPECIAL_TOKENS; the 256 byte symbols follow.

# Qwen3-style semantics: a leading system message (plus a <tools> listing when tools are given)
# opens the prompt; assistant reasoning is kept only for turns after the last user message
# (earlier reasoning is dropped); consecutive tool results share one user turn; with
# enable_thinking=false the generation prompt also carries an empty <think> block.
CHAT_TEMPLATE = r"""{#- eaglefeed demo template: ChatML turns, <think> reasoning, tool calls. -#}
{%- macro text_of(content) -%}
{%- if content is not defined or content is none -%}
{%- elif content is string -%}{{- content -}}
{%- elif content is mapping -%}{{- content.text if content.text is defined else '' -}}
{%- elif content is iterable -%}
{%- for part in content -%}
{%- if part is string -%}{{- part -}}
{%- elif part is mapping and part.text is defined -%}{{- part.text -}}
{%- endif -%}
{%- endfor -%}
{%- else -%}{{- content -}}
{%- endif -%}
{%- endmacro -%}
{%- set ns = namespace(last_user=-1) -%}
{%- for message in messages -%}
{%- if message.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}
{%- endfor -%}
{%- set has_system = messages and messages[0].role == 'system' -%}
{%- if tools -%}
{{- '<|im_start|>system\n' -}}
{%- if has_system -%}{{- text_of(messages[0].content) + '\n\n' -}}{%- endif -%}
{{- '# Tools\n\nThe following functions are available. ' -}}
{{- 'Their JSON schemas are listed inside <tools></tools>:\n<tools>' -}}
{%- for tool in tools -%}{{- '\n' + (tool | tojson) -}}{%- endfor -%}
{{- '\n</tools>\n\nTo call a function, reply with a JSON object holding its name and ' -}}
{{- 'arguments, wrapped in <tool_call></tool_call> tags:\n<tool_call>\n' -}}
{{- '{"name": <function-name>, "arguments": <arguments-json-object>}\n</tool_call><|im_end|>\n' -}}
{%- elif has_system -%}
{{- '<|im_start|>system\n' + text_of(messages[0].content) + '<|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
{%- set content = text_of(message.content) -%}
{%- if message.role == 'system' -%}
{%- if not loop.first -%}{{- '<|im_start|>system\n' + content + '<|im_end|>\n' -}}{%- endif -%}
{%- elif message.role == 'user' -%}
{{- '<|im_start|>user\n' + content + '<|im_end|>\n' -}}
{%- elif message.role == 'assistant' -%}
{%- set reasoning = message.reasoning_content if message.reasoning_content is string else '' -%}
{%- if '</think>' in content -%}
{%- set reasoning = content.split('</think>')[0].split('<think>')[-1] -%}
{%- set content = content.split('</think>')[-1].lstrip('\n') -%}
{%- endif -%}
{%- set reasoning = reasoning.strip('\n') -%}
{{- '<|im_start|>assistant\n' -}}
{%- if loop.index0 > ns.last_user and (loop.last or reasoning) -%}
{{- '<think>\n' + reasoning + '\n</think>\n\n' -}}
{%- endif -%}
{{- content -}}
{%- if message.tool_calls -%}
{%- for call in message.tool_calls -%}
{%- set fn = call.function if call.function is defined else call -%}
{%- if content or not loop.first -%}{{- '\n' -}}{%- endif -%}
{{- '<tool_call>\n{"name": ' + (fn.name | tojson) + ', "arguments": ' -}}
{%- if fn.arguments is string -%}{{- fn.arguments -}}
{%- else -%}{{- fn.arguments | tojson -}}{%- endif -%}
{{- '}\n</tool_call>' -}}
{%- endfor -%}
{%- endif -%}
{{- '<|im_end|>\n' -}}
{%- elif message.role == 'tool' -%}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}
{{- '<|im_start|>user' -}}
{%- endif -%}
{{- '\n<tool_response>\n' + content + '\n</tool_response>' -}}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}
{{- '<|im_end|>\n' -}}
{%- endif -%}
{%- else -%}
{{- raise_exception('Unsupported message role: ' + message.role) -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\n' -}}
{%- if enable_thinking is defined and enable_thinking is false -%}
{{- '<think>\n\n</think>\n\n' -}}
{%- endif -%}
{%- endif -%}
"""

_WORDS = {
    "noun": """
    account address agreement airport algorithm analysis animal answer apartment apple
    application architecture argument article assignment atmosphere audience author average
    balance battery beach behaviour benchmark bicycle biology birthday boundary branch
    breakfast bridge browser budget buffer building bundle business butter cabinet calendar
    camera campaign candidate capacity capital carbon category ceiling certificate challenge
    channel chapter character chemistry children chocolate circle citizen climate cluster
    coffee collection college column comment committee community company comparison compiler
    component computer concept condition conference connection constraint container context
    contract controller conversation country courage cousin customer dashboard database
    deadline decision definition delivery department deployment description designer dictionary
    difference dinner direction discount discussion distance document donation economy editor
    education efficiency election element elephant employee encoding energy engine engineer
    environment equation error estimate evening evidence example exception exercise experience
    experiment explanation expression factory failure feature feedback festival figure finance
    flight flower forecast forest formula fraction framework friend function future gallery
    garden generation geography government gradient graph guitar habit hardware harvest health
    history holiday hospital household hypothesis identity image implementation income industry
    infrastructure ingredient instance instruction insurance integer interface internet
    interview invoice island journey keyboard kitchen knowledge laboratory landscape language
    laptop latency lecture library license lifetime limit literature location machine magazine
    manager manuscript market material matrix measurement medicine meeting memory message
    metadata method microphone middleware migration minute mission mistake model moment monitor
    morning mountain museum musician network newspaper notebook number object ocean office
    operation opinion option orchestra organization outcome package painting parameter parent
    partition password pattern payment performance permission person philosophy photograph
    physics picture pipeline planet platform player pocket poetry policy politics population
    portfolio position possibility potato practice prediction preference presentation pressure
    printer priority probability problem procedure process product profile program project
    property proposal protocol purpose quality quantity question queue railway reaction reader
    reason recipe recommendation record reference region relationship release report repository
    request requirement research resource response restaurant result revenue review river
    routine sandwich satellite schedule schema science scientist screen script season secret
    section security sentence sequence server service session setting shadow shoulder signal
    simulation skill software solution source speaker specification spreadsheet station
    statistics storage strategy stream street strength structure student subscription success
    suggestion summary supplier surface symbol syntax system teacher technology telescope
    temperature template terminal territory theory thread ticket timestamp tomato tournament
    tradition traffic transaction translation transport treatment triangle university update
    user vacation validation variable vegetable vehicle version village visitor vocabulary
    volume volunteer warehouse weather website weekend window winter workflow
    """,
    "verb": """
    accept achieve adjust allocate analyze announce approve arrange assemble assign attach
    balance borrow calculate cancel capture celebrate change check clarify collect combine
    compare compile complete compress configure confirm connect consider construct convert copy
    correct create debug decide declare decrypt define delete deliver deploy describe design
    detect develop discover display divide download draft encode encourage enable estimate
    evaluate examine execute expand explain explore export extract fetch filter finish fix
    follow forecast format generate gather handle identify ignore implement import improve
    include increase index initialize inspect install integrate interpret introduce investigate
    join launch measure merge migrate monitor navigate negotiate normalize observe obtain
    optimize organize paint parse perform plan predict prepare present preserve print process
    produce publish query rank read receive recommend record reduce refactor register reject
    release remove rename render repair replace report request require reserve resolve restore
    retrieve return review rewrite rotate sample save schedule search select serialize share
    simplify solve sort split store stream submit summarize support test train transfer
    transform translate update upgrade upload validate verify visualize write
    """,
    "adj": """
    accurate active ambitious ancient anxious automatic available beautiful brief bright broken
    busy careful cheap clever complex concise consistent creative critical curious dangerous
    decent detailed different difficult digital distributed dynamic eager efficient elegant
    empty enormous essential exact excellent expensive external familiar famous fast flexible
    fragile friendly generous gentle global graceful helpful hidden honest huge immutable
    important incredible independent internal large lazy legal local logical lovely mature
    modern modest narrow natural nervous noisy obvious official optional orange ordinary
    parallel patient perfect personal polite popular portable powerful practical precise
    previous private public quiet random rapid rare readable realistic recent regular reliable
    remote robust rural scalable secure sensible serious silent simple slow smooth special
    stable strange strict strong subtle sudden sufficient temporary thoughtful tiny typical
    unique unusual urgent useful valid various vivid warm wealthy
    """,
    "adv": """
    actually almost always apparently briefly carefully certainly clearly closely completely
    constantly correctly daily deliberately directly easily entirely especially eventually
    exactly finally frequently generally gradually honestly immediately initially largely
    literally mostly naturally nearly normally occasionally often originally particularly
    perhaps possibly precisely previously probably properly quickly quietly rarely really
    recently regularly roughly seriously simply slightly slowly sometimes soon specifically
    strongly suddenly surely typically usually
    """,
}
_LEX = {kind: words.split() for kind, words in _WORDS.items()}
_PEOPLE = "Alice Bob Carmen Dmitri Emeka Fatima Giulia Hiroshi Ingrid Jamal Kavya Lukas Mei".split()
_EXTRA = [
    "Café, naïve, résumé — déjà vu.",
    "数据处理模型",
    "Привет, как дела?",
    "¿Dónde está?",
    "emoji: 🚀 ✅ 🎉",
    "Zürich → München ≈ 300 km",
    "x² + y² = r²; ∑ aᵢ ≥ 0",
    "こんにちは世界",
]


def _ing(verb: str) -> str:
    return (verb[:-1] if verb.endswith("e") and not verb.endswith("ee") else verb) + "ing"


def _ed(verb: str) -> str:
    return verb + ("d" if verb.endswith("e") else "ed")


def _plural(noun: str) -> str:
    if noun.endswith("is"):
        return noun[:-2] + "es"
    if noun.endswith(("s", "sh", "ch", "x")):
        return noun + "es"
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    return noun + "s"


def _english(rng: random.Random) -> str:
    def word(kind: str) -> Callable[[], str]:
        return lambda: rng.choice(_LEX[kind])

    n, v, a, d = (word(kind) for kind in ("noun", "verb", "adj", "adv"))
    who = rng.choice(_PEOPLE)
    return rng.choice(
        [
            f"{who} {d()} {_ed(v())} the {a()} {n()} before the {n()} {_ed(v())}.",
            f"The {a()} {_plural(n())} were {_ing(v())} {d()}, so {who} chose to {v()} the {n()}.",
            f"What is the difference between a {n()} and a {n()}? A {n()} is usually more {a()}.",
            f"Could you {v()} my {n()} and {v()} the {a()} {_plural(n())}? Thanks!",
            f"Sure! Here is a plan:\n1. {v().title()} the {n()}.\n2. {v().title()} the "
            f"{_plural(n())}.\n3. {v().title()} everything {d()}.",
            f"Let me think step by step. If {rng.randint(2, 99)} {_plural(n())} cost "
            f"{rng.randint(2, 999)} dollars, then each {n()} costs about {rng.randint(1, 50)}.",
            f"{who}'s {n()} isn't {a()}; it's {d()} {a()} and we're {_ing(v())} it.",
        ]
    )


def _code(rng: random.Random) -> str:
    v, n, m = rng.choice(_LEX["verb"]), rng.choice(_LEX["noun"]), rng.choice(_LEX["noun"])
    k = rng.randint(1, 100)
    camel = f"{v}{n.title()}"
    return rng.choice(
        [
            f"def {v}_{n}({_plural(n)}: list[dict], limit: int = {k}) -> list[dict]:\n"
            f'    """{v.title()} the {_plural(n)}."""\n    result = []\n'
            f'    for {n} in {_plural(n)}[:limit]:\n        if {n}.get("{m}") is not None:\n'
            f"            result.append({n})\n    return result\n",
            f"class {n.title()}{m.title()}:\n    def __init__(self, {m}: str) -> None:\n"
            f"        self.{m} = {m}\n\n    def {v}(self) -> bool:\n"
            f"        return bool(self.{m})\n",
            f"export async function {camel}({m}Id) {{\n"
            f"  const res = await fetch(`/api/{_plural(n)}/${{{m}Id}}`);"
            f'\n  if (!res.ok) throw new Error("failed to {v} {n}");\n  return res.json();\n}}\n',
            f"SELECT {n}_id, COUNT(*) AS total FROM {_plural(n)} WHERE {m} >= {k} GROUP BY {n}_id;",
            f'$ git commit -m "{v} {n} {m}" && pytest -q tests/test_{n}.py -k {v}',
            json.dumps({"name": f"{v}_{n}", "arguments": {m: k, "verbose": k % 2 == 0}}),
            f"for (size_t i = 0; i < {n}_count; ++i) {{ {_plural(n)}[i].{m} = {camel}(i); }}",
            f"## {v.title()} the {n}\n\n- Read the `{m}` field.\n- Call `{camel}()`.\n"
            f"```python\nprint({v}_{n}({k}))\n```",
            f"Compute {k} * {k + 7} = {k * (k + 7)}, then {k} / 8 = {k / 8}.",
        ]
    )


def build_corpus(lines: int = 8000) -> list[str]:
    """Generate the deterministic English and code training corpus.

    Args:
        lines: Number of generated snippets.

    Returns:
        A list of corpus snippets.
    """
    rng = random.Random(SEED)
    corpus = [_english(rng) if rng.random() < 0.55 else _code(rng) for _ in range(lines)]
    return corpus + _EXTRA


def train_tokenizer(corpus: list[str]) -> Tokenizer:
    """Train the byte-level BPE tokenizer with the special tokens at the lowest ids.

    Args:
        corpus: Training snippets.

    Returns:
        The trained tokenizer.
    """
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=1,
        show_progress=False,
        special_tokens=[AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    return tok


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def write_tokenizer(out_dir: Path) -> None:
    """Train the tokenizer and write every file transformers needs into ``out_dir``.

    Args:
        out_dir: Destination folder (created if missing).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    train_tokenizer(build_corpus()).save(str(out_dir / "tokenizer.json"), pretty=True)
    extra = list(SPECIAL_TOKENS[1:])
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": False,
        "add_eos_token": False,
        "add_prefix_space": False,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "additional_special_tokens": extra,
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": False,
        "model_max_length": 32768,
    }
    _write_json(out_dir / "tokenizer_config.json", config)
    special_map = {k: config[k] for k in ("eos_token", "pad_token", "additional_special_tokens")}
    _write_json(out_dir / "special_tokens_map.json", special_map)
    (out_dir / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")


def main() -> None:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="output folder")
    write_tokenizer(parser.parse_args().out)


if __name__ == "__main__":
    main()
