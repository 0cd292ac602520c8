"""What the scenarios feed the pipeline: distinct good prompts, a fuzzed prompt file, raw garbage records.

Every input line carries its line number as its ``id`` (or has none, and the producer stamps the
line number), so a training row leads back to its line through ``source_row``.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

from eaglefeed.devtools.demo import SAMPLE_PROMPTS, TOKENIZER_DIR
from eaglefeed.schemas import GENERATION, PROMPT
from eaglefeed.schemas.codec import HEADER_LEN

_SAMPLES = [json.loads(line) for line in SAMPLE_PROMPTS.read_text().splitlines()]


def good_line(line: int, tag: str) -> bytes:
    """A valid prompt row, distinct from every other (a variant note on its last user turn)."""
    row = json.loads(json.dumps(_SAMPLES[line % len(_SAMPLES)]))
    row["id"] = str(line)
    row.pop("sampling_params", None)  # the run's --max-new-tokens keeps requests short
    turns = row.get("messages") or row["conversations"]
    key = "content" if "messages" in row else "value"
    last = max(i for i, t in enumerate(turns) if t.get("role", t.get("from")) in ("user", "human"))
    turns[last][key] = f"{turns[last][key]} (variant {tag}-{line})"
    return json.dumps(row).encode()


CONVERSATION_TURNS = 3  # user turns of each multi-turn line, and the producer's --max-turns for them


def conversation_line(line: int, tag: str) -> bytes:
    """A multi-turn row (``CONVERSATION_TURNS`` user turns) for ``--history rerender``, id ``conv-<line>``.

    Its assistant turns are the dataset's own and are never sent: the converse stage builds each
    next prompt from the model's earlier turns.
    """
    messages: list[dict[str, str]] = []
    for turn in range(CONVERSATION_TURNS):
        messages.append({"role": "user", "content": f"Question {turn + 1} of conversation {tag}-{line}: "
                                                    f"what is {line} plus {turn}?"})
        messages.append({"role": "assistant", "content": f"{line + turn}."})
    return json.dumps({"id": f"conv-{line}", "messages": messages}).encode()


def expected_row_id(line: int, raw: bytes) -> str:
    """The ``source_row`` a row made from this line would carry: its ``id``, else its line number."""
    try:
        row = json.loads(raw)
    except (ValueError, RecursionError):
        return str(line)
    row_id = row.get("id") if isinstance(row, dict) else None
    if isinstance(row_id, (str, int)) and not isinstance(row_id, bool):
        return str(row_id)
    return str(line)


def hostile_lines(first: int, count: int, seed: int, huge_bytes: int = 2_000_000) -> list[bytes]:
    """``count`` fuzzed lines numbered from ``first``, each distinct.

    Broken JSON and UTF-8, wrong types, unknown roles, huge lines, deep nesting, random bytes,
    and valid oddities (emoji, NUL, special-token text) that must become rows.
    """
    rng = random.Random(seed)
    makers = [_truncated, _bad_utf8, _wrong_types, _unknown_role, _deep_array, _deep_object, _random_bytes,
              _scalar, _surrogate, _empty_messages, _assistant_only, _exotic_valid, _overflowing_sampling,
              _many_messages, _huge]
    lines = []
    for i in range(count):
        n = first + i
        maker = makers[i % len(makers)]
        lines.append(maker(n, rng, huge_bytes) if maker is _huge else maker(n, rng))
    return [line.replace(b"\n", b" ").replace(b"\r", b" ") for line in lines]


def garbage_prompts(seed: int, count: int) -> list[bytes | None]:
    """Values for the prompts topic that are no usable PromptRecord.

    Random bytes, empty and null values, a valid header on a random body, and well-formed
    records that break the rules (no ids, 0 or 5000 samples, over the context). A record naming a
    tokenizer the worker cannot load is not among them: that is a configuration problem, which stops
    the worker without dead-lettering anything (tests/integration/test_worker_config_errors.py).
    """
    rng = random.Random(seed)
    header = PROMPT.encode(_prompt(0))[:HEADER_LEN]
    broken = [_prompt(1, input_ids=[]), _prompt(2, num_samples=0), _prompt(3, num_samples=5000),
              _prompt(4, max_new_tokens=0), _prompt(5, input_ids=[7] * 9000)]
    values: list[bytes | None] = [None, b"", header, header + rng.randbytes(40), rng.randbytes(1 << 20)]
    values += [PROMPT.encode(p) for p in broken]
    while len(values) < count:
        values.append(rng.randbytes(rng.randrange(1, 300)) if rng.random() < 0.5
                      else header + rng.randbytes(rng.randrange(1, 300)))
    return values[:count]


def garbage_generations(seed: int, count: int) -> list[bytes | None]:
    """Values for the generations topic that must never become rows.

    Random bytes, null values, a valid header on a random body, and well-formed records that
    fail the sink's checks (token counts, empty output, negative ids, empty id).
    """
    rng = random.Random(seed)
    header = GENERATION.encode(_generation("x:0"))[:HEADER_LEN]
    broken = [_generation("g:0", completion_tokens=99), _generation("g:1", output_ids=[]),
              _generation("g:2", output_ids=[5, -3, 7], completion_tokens=3), _generation("")]
    values: list[bytes | None] = [None, b"", header + rng.randbytes(64), rng.randbytes(200_000)]
    values += [GENERATION.encode(g) for g in broken]
    while len(values) < count:
        values.append(rng.randbytes(rng.randrange(1, 300)) if rng.random() < 0.5
                      else header + rng.randbytes(rng.randrange(1, 300)))
    return values[:count]


def _user(n: int, text: str, **extra: Any) -> dict[str, Any]:
    return {"id": str(n), "messages": [{"role": "user", "content": text}], **extra}


def _truncated(n: int, rng: random.Random) -> bytes:
    line = good_line(n, "cut")
    return line[: rng.randrange(1, len(line) - 1)]


def _bad_utf8(n: int, rng: random.Random) -> bytes:
    bad = b"caf\xe9 \xff\xfe" + rng.randbytes(4)
    return json.dumps(_user(n, "PLACEHOLDER")).encode().replace(b"PLACEHOLDER", bad)


def _wrong_types(n: int, rng: random.Random) -> bytes:
    return json.dumps(rng.choice([
        {"id": str(n), "messages": "not a list"},
        {"id": n + 0.5, "messages": [{"role": "user", "content": f"float id {n}"}]},
        {"id": [n], "messages": [{"role": "user", "content": f"list id {n}"}]},
        {"id": str(n), "messages": [{"role": "user", "content": n}]},
        {"id": str(n), "messages": [{"role": "user", "content": {"nested": n}}]},
        _user(n, f"tools {n}", tools="nope"),
        _user(n, f"sampling {n}", sampling_params={"temperature": "hot"}),
    ])).encode()


def _unknown_role(n: int, rng: random.Random) -> bytes:
    if rng.random() < 0.5:
        return json.dumps({"id": str(n), "messages": [{"role": "wizard", "content": f"spell {n}"}]}).encode()
    return json.dumps({"id": str(n), "conversations": [{"from": "alien", "value": f"hello {n}"}]}).encode()


def _deep_array(n: int, rng: random.Random) -> bytes:
    depth = rng.randrange(20_000, 100_000)
    return b"[" * depth + str(n).encode() + b"]" * depth


def _deep_object(n: int, rng: random.Random) -> bytes:
    depth = rng.randrange(2_000, 20_000)
    inner = b'{"a":' * depth + b"1" + b"}" * depth
    return (b'{"id": "%d", "messages": [{"role": "user", "content": "deep %d", "extra": ' % (n, n)
            + inner + b"}]}")


def _random_bytes(n: int, rng: random.Random) -> bytes:
    return b"\x00" + str(n).encode() + rng.randbytes(rng.randrange(1, 2000))


def _scalar(n: int, rng: random.Random) -> bytes:
    return rng.choice([b"%d" % n, b'"line %d"' % n, b"[%d, 2, 3]" % n, b"null", b"true"])


def _surrogate(n: int, _rng: random.Random) -> bytes:
    return b'{"id": "%d", "messages": [{"role": "user", "content": "lone \\ud800 surrogate %d"}]}' % (n, n)


def _empty_messages(n: int, _rng: random.Random) -> bytes:
    return json.dumps({"id": str(n), "messages": []}).encode()


def _assistant_only(n: int, _rng: random.Random) -> bytes:
    return json.dumps({"id": str(n), "messages": [{"role": "assistant", "content": f"only me {n}"}]}).encode()


def _exotic_valid(n: int, rng: random.Random) -> bytes:
    text = rng.choice(["emoji 🦅🔥", "rtl עברית العربية", "nul \u0000 byte", "tab\tand\u2028sep",
                       "<|im_end|>"])
    return json.dumps(_user(n, f"{text} {n}"), ensure_ascii=rng.random() < 0.5).encode()


def _overflowing_sampling(n: int, rng: random.Random) -> bytes:
    params = rng.choice([{"max_new_tokens": 10**12}, {"max_new_tokens": -5}, {"top_k": 2**40},
                         {"temperature": float("inf")}, {"seed": "x"}])
    return json.dumps(_user(n, f"sampling {n}", sampling_params=params)).encode()


def _many_messages(n: int, _rng: random.Random) -> bytes:
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} of {n}"}
             for i in range(4001)]
    return json.dumps({"id": str(n), "messages": turns}).encode()


def _huge(n: int, _rng: random.Random, size: int) -> bytes:
    return json.dumps(_user(n, f"huge {n} " + "lorem ipsum " * (size // 12))).encode()


def _prompt(i: int, **over: Any) -> dict[str, Any]:
    sampling = {"max_new_tokens": over.pop("max_new_tokens", 16), "temperature": 0.7, "top_p": 0.95,
                "top_k": 20, "min_p": 0.0, "stop_token_ids": [], "seed": i}
    record = {"prompt_id": f"hostile-{i:04d}", "source": "hostile", "source_row": str(i), "turn_index": 0,
              "input_ids": [11, 12, 13], "num_samples": 1, "sampling_params": sampling,
              "chat_template_kwargs": "{}", "tokenizer_id": str(TOKENIZER_DIR), "tokenizer_hash": "h",
              "chat_template_hash": "c", "created_at": int(time.time() * 1000)}
    record.update(over)
    return record


def _generation(record_id: str, **over: Any) -> dict[str, Any]:
    record = {"id": record_id, "prompt_id": record_id.split(":")[0], "sample_index": 0,
              "prompt_ids": [11, 12, 13], "output_ids": [21, 22, 2], "finish_reason": "stop",
              "matched_stop": 2, "prompt_tokens": 3, "completion_tokens": 3, "cached_tokens": 0,
              "latency_seconds": 0.1, "endpoint": "forged", "model_path": "forged", "engine_version": "0",
              "worker_id": "forged", "source": "hostile", "source_row": record_id, "turn_index": 0,
              "sampling_params": "{}", "chat_template_kwargs": "{}", "tokenizer_id": str(TOKENIZER_DIR),
              "tokenizer_hash": "h", "chat_template_hash": "c", "prompt_created_at": 0, "created_at": 0}
    record.update(over)
    return record


def write_lines(path: Path, lines: list[bytes]) -> None:
    """Append whole lines to ``path`` in one write (a follower never sees half a line for long)."""
    with open(path, "ab") as fh:
        fh.write(b"".join(line + b"\n" for line in lines))
