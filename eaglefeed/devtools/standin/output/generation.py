"""Deterministic output-token model: which ids a request gets back and why it finished.

A response is planned in two steps, both pure:

1. ``natural_sequence`` draws what the "model" wants to say from ``Draws`` keyed by a blake2b
   hash of the prompt ids and the sampling parameters: an optional ``<think>`` block, a
   body of normal-vocabulary tokens or ``<tool_call>`` blocks, and whether it ends with a stop id.
2. ``plan_completion`` runs SGLang 0.5.23's finish order over it, token by token in effect:
   stop strings matched on the decoded text, then stop ids (unless ``ignore_eos``), then the
   ``max_new_tokens`` length check. The matched stop id or the token completing a stop
   string is the last output id.

Raising ``max_new_tokens`` never changes the earlier tokens: outputs are prefixes of each other.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import secrets
from array import array
from dataclasses import dataclass
from hashlib import blake2b
from typing import Any

from eaglefeed.devtools.standin.output.declarations import OfferedTool
from eaglefeed.devtools.standin.output.draws import Draws
from eaglefeed.devtools.standin.output.toolformats import (
    answers_a_tool_result_in,
    call_text,
    encode,
    harmony_analysis,
    harmony_final,
    next_role_stop,
)
from eaglefeed.devtools.standin.output.tools import (
    answers_a_tool_result,
    call_ids,
    declared_tools,
    find_subsequence,
    pick_call,
)
from eaglefeed.devtools.standin.sampling import SamplingParams
from eaglefeed.devtools.standin.vocab import Vocab, made_up_calls


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputModel:
    """Shape of the outputs (from the server config).

    Attributes:
        output_len_mean: mean of the lognormal natural length, in tokens.
        output_len_sigma: sigma of that lognormal.
        think_fraction: share of responses with a ``<think>`` block.
        tool_call_fraction: share of tool-bearing prompts answered with tool calls.
        parallel_tool_call_fraction: share of those answers with two calls instead of one.
        length_fraction: share of responses that never emit a stop id.
        random_seed: server-wide seed.
        tool_call_format: how calls are written (``eaglefeed.devtools.standin.output.toolformats``);
            ``gpt_oss`` also writes reasoning and answers as Harmony messages.
        seed_mode: how ``sampling_seed`` and the sample index enter the draws (``StandinConfig``).
    """

    output_len_mean: float = 200.0
    output_len_sigma: float = 0.8
    think_fraction: float = 0.3
    tool_call_fraction: float = 0.5
    length_fraction: float = 0.05
    random_seed: int = 0
    parallel_tool_call_fraction: float = 0.3
    tool_call_format: str = "hermes"
    seed_mode: str = "always"  # StandinConfig.seed_mode


@dataclass(frozen=True, slots=True)
class Completion:
    """What the engine emits for one request item.

    Attributes:
        output_ids: every emitted id, through the stop id or stop-string token.
        finish_reason: SGLang's ``finish_reason`` dict.
    """

    output_ids: list[int]
    finish_reason: dict[str, Any]

    def truncated(self, count: int, finish_reason: dict[str, Any]) -> Completion:
        """Return the first ``count`` ids with another finish reason (aborts)."""
        return Completion(self.output_ids[:count], finish_reason)


@dataclass(frozen=True, slots=True)
class NaturalSequence:
    """What the model "wants" to emit before any limit applies.

    Attributes:
        ids: the tokens, without a final stop id.
        ends: whether the model then emits a stop id (False: it would run on forever).
        stop: the stop id it then emits when not the request's first (Harmony's ``<|call|>``
            after a call), else None.
    """

    ids: list[int]
    ends: bool
    stop: int | None = None


def plan_completion(
    *,
    vocab: Vocab,
    model: OutputModel,
    input_ids: list[int],
    params: SamplingParams,
    max_new_tokens: int,
    sample_index: int = 0,
) -> Completion:
    """Plan the full output of one request item.

    Args:
        vocab: token facts of the served tokenizer.
        model: output-shape knobs.
        input_ids: the prompt ids.
        params: validated sampling parameters.
        max_new_tokens: the effective limit (already clamped to the context).
        sample_index: position among the ``n`` samples of this prompt.
    """
    if max_new_tokens <= 0:
        return Completion([], {"type": "length", "length": 0})
    rng = Draws(request_key(input_ids, _seeded(params, model.seed_mode), 0 if model.seed_mode != "always"
                            else sample_index, model.random_seed))
    natural = natural_sequence(rng=rng, vocab=vocab, model=model, input_ids=input_ids)
    stop_ids = () if params.ignore_eos else tuple(dict.fromkeys((*params.stop_token_ids, vocab.eos_id)))
    ids = natural.ids
    if natural.ends and stop_ids:
        ids = _pad(rng, vocab, ids, params.min_new_tokens) + [natural.stop or stop_ids[0]]
    elif len(ids) < max_new_tokens:
        ids = _pad(rng, vocab, ids, max_new_tokens)
    ids, stop_at = _first_stop_id(ids, stop_ids, params, vocab)
    if stop_at is None and natural.ends and stop_ids and natural.stop is not None and ids[-1] == natural.stop:
        stop_at = len(ids) - 1  # the model's own stop: a Harmony call's <|call|>
    ids = ids[:max_new_tokens]
    # SGLang 0.5.23's order (``Req.update_finish_state``): a stop string, then a stop id, then
    # the length, so a stop on the last allowed token finishes ``stop``, not ``length``.
    if params.stop:
        string_end, matched = _first_stop_string(vocab, ids, params.stop)
        if string_end is not None:
            return Completion(ids[:string_end], {"type": "stop", "matched": matched})
    if stop_at is not None and stop_at < max_new_tokens:
        return Completion(ids, {"type": "stop", "matched": ids[-1]})
    return Completion(ids, {"type": "length", "length": max_new_tokens})


def _seeded(params: SamplingParams, seed_mode: str) -> SamplingParams:
    """The params whose seed the draws follow, as SGLang 0.5.23's sampler does.

    ``deterministic``: the request's ``sampling_seed``, 42 when it sends none
    (``srt/sampling/sampling_batch_info.py``), and the ``n`` samples share it (the caller drops
    their index). ``ignored``: SGLang passes no seed to its sampler without
    ``--enable-deterministic-inference``, so every request draws anew (a fresh random seed).
    """
    if seed_mode == "deterministic" and params.sampling_seed is None:
        return dataclasses.replace(params, sampling_seed=42)
    if seed_mode == "ignored" and not params.greedy:
        return dataclasses.replace(params, sampling_seed=secrets.randbits(63))
    return params


def request_key(input_ids: list[int], params: SamplingParams, sample_index: int, random_seed: int) -> bytes:
    """Hash the prompt and the sampling parameters into the key of the request's draws.

    blake2b, not the salted built-in ``hash()``, so keys are stable across processes. Greedy
    requests ignore ``sampling_seed`` and the sample index, so their ``n`` samples agree.
    """
    digest = blake2b(array("q", input_ids).tobytes(), digest_size=32)
    digest.update(_params_key(params, sample_index, random_seed))
    return digest.digest()


@functools.lru_cache(maxsize=1024)
def _params_key(params: SamplingParams, sample_index: int, random_seed: int) -> bytes:
    penalties = (
        params.frequency_penalty,
        params.presence_penalty,
        params.repetition_penalty,
        params.logit_bias,
    )
    if params.greedy:
        key: tuple[Any, ...] = ("greedy", random_seed, penalties)
    else:
        key = (params.temperature, params.top_p, params.top_k, params.min_p, penalties)
        key += (params.sampling_seed, sample_index, random_seed)
    return repr(key).encode()


def natural_sequence(
    *, rng: Draws, vocab: Vocab, model: OutputModel, input_ids: list[int]
) -> NaturalSequence:
    """Draw the unconstrained output: optional think block, body or tool calls, stop or not.

    Args:
        rng: the request's seeded generator (draw order is fixed).
        vocab: token facts.
        model: output-shape knobs.
        input_ids: the prompt (its tail says whether thinking is disabled or already open).
    """
    length = _draw_length(rng, model)
    tail = _last_meaningful_id(input_ids, vocab.whitespace_ids)
    start, end = vocab.think_start, vocab.think_end
    thinks = start is not None and end is not None and tail != end
    opened = thinks and tail == start
    wants_think = rng.random() < model.think_fraction
    wants_tools = rng.random() < model.tool_call_fraction
    runs_to_length = rng.random() < model.length_fraction
    ids: list[int] = []
    newline = list(vocab.newline_ids)
    fmt = model.tool_call_format
    if fmt == "gpt_oss":
        return _harmony(rng, vocab, model, input_ids, length=length, think=wants_think,
                        tools=wants_tools, ends=not runs_to_length)
    if start is not None and end is not None and thinks and (opened or wants_think):
        think_len = max(1, int(length * rng.uniform(0.3, 0.7)))
        if not opened:
            ids += [start, *newline]
        ids += _body(rng, vocab, think_len) + newline + [end] + newline + newline
    offered = _offered(input_ids, vocab, fmt) if wants_tools else None
    if offered is not None and _answers_result(fmt, input_ids, vocab):
        offered = None  # a model just given its tool's result answers with text
    calls = offered is not None
    if offered is not None:
        ids += _tool_calls(rng, vocab, model, offered)
    else:
        ids += _body(rng, vocab, max(1, length - len(ids)))
    return NaturalSequence(ids, not runs_to_length, stop=next_role_stop(fmt, vocab, calls=calls))


def _harmony(rng: Draws, vocab: Vocab, model: OutputModel, input_ids: list[int], *, length: int,
             think: bool, tools: bool, ends: bool) -> NaturalSequence:
    """gpt-oss's turn as Harmony messages (the prompt ends with ``<|start|>assistant``).

    An analysis message (the reasoning), then calls (each ending in ``<|call|>``) or a final answer.
    """
    ids: list[int] = []
    if think:
        opening, closing = harmony_analysis(vocab)
        ids += opening + _body(rng, vocab, max(1, int(length * rng.uniform(0.3, 0.7)))) + closing
    offered = _offered(input_ids, vocab, "gpt_oss") if tools else None
    if offered is not None and not _answers_result("gpt_oss", input_ids, vocab):
        calls = encode(vocab, call_text("gpt_oss", _pick_calls(rng, model, offered)))
        return NaturalSequence(ids + calls[:-1], ends, stop=calls[-1])  # the last <|call|> stops it
    ids += harmony_final(vocab)
    return NaturalSequence(ids + _body(rng, vocab, max(1, length - len(ids))), ends)


def _answers_result(fmt: str, input_ids: list[int], vocab: Vocab) -> bool:
    if fmt == "hermes":
        return answers_a_tool_result(input_ids, vocab)
    return answers_a_tool_result_in(fmt, input_ids, vocab)


def _draw_length(rng: Draws, model: OutputModel) -> int:
    sigma = model.output_len_sigma
    mu = math.log(model.output_len_mean) - sigma * sigma / 2
    return max(1, round(rng.lognormvariate(mu, sigma)))


def _body(rng: Draws, vocab: Vocab, count: int) -> list[int]:
    """Return ``count`` normal ids: a window of the vocab's pseudo-random pool at a random offset."""
    pool = vocab.token_pool
    start = rng.randrange(len(pool))
    ids = pool[start : start + count]
    while len(ids) < count:
        ids += pool[: count - len(ids)]
    return ids


def _pad(rng: Draws, vocab: Vocab, ids: list[int], length: int) -> list[int]:
    if len(ids) >= length:
        return ids
    return ids + _body(rng, vocab, length - len(ids))


def _tool_calls(rng: Draws, vocab: Vocab, model: OutputModel, offered: tuple[OfferedTool, ...]) -> list[int]:
    """One call, or two (parallel) in a ``parallel_tool_call_fraction`` share, in the model's format.

    A call names one of the ``offered`` tools (read from the prompt's declaration), or one of a
    fixed set of made-up calls when none could be read.
    """
    if model.tool_call_format != "hermes":
        return encode(vocab, call_text(model.tool_call_format, _pick_calls(rng, model, offered)))
    if vocab.tool_call_start is None or vocab.tool_call_end is None or not vocab.tool_call_bodies:
        return _body(rng, vocab, 8)
    newline = list(vocab.newline_ids)
    ids: list[int] = []
    for index in range(1 + (rng.random() < model.parallel_tool_call_fraction)):
        if index:
            ids += newline
        if offered:
            body = call_ids(rng, vocab, offered)
        else:
            body = list(vocab.tool_call_bodies[rng.randrange(len(vocab.tool_call_bodies))])
        ids += [vocab.tool_call_start, *newline, *body, *newline, vocab.tool_call_end]
    return ids


def _pick_calls(rng: Draws, model: OutputModel,
                offered: tuple[OfferedTool, ...]) -> list[tuple[str, dict[str, Any]]]:
    """The calls of one turn, drawn in the order the Hermes path draws them."""
    made_up = made_up_calls()
    return [pick_call(rng, offered) if offered else made_up[rng.randrange(len(made_up))]
            for _ in range(1 + (rng.random() < model.parallel_tool_call_fraction))]


def _last_meaningful_id(input_ids: list[int], whitespace_ids: frozenset[int]) -> int | None:
    for token_id in reversed(input_ids):
        if token_id not in whitespace_ids:
            return token_id
    return None


def _offered(input_ids: list[int], vocab: Vocab, fmt: str) -> tuple[OfferedTool, ...] | None:
    """The tools the prompt offers in ``fmt``'s declaration; None when it offers none.

    A prompt that already holds a ``<tool_call>`` id offers tools even when no declaration can
    be found (its calls then name made-up tools).
    """
    offered = declared_tools(input_ids, vocab, fmt)
    if offered is None and vocab.tool_call_start is not None and vocab.tool_call_start in input_ids:
        return ()
    return offered


def contains_subsequence(haystack: list[int], needle: tuple[int, ...]) -> bool:
    """Return True when ``needle`` occurs contiguously in ``haystack``."""
    return find_subsequence(haystack, needle) is not None


def _first_stop_id(
    ids: list[int], stop_ids: tuple[int, ...], params: SamplingParams, vocab: Vocab
) -> tuple[list[int], int | None]:
    """Cut ``ids`` after the first stop id at or past ``min_new_tokens``; mask earlier ones."""
    start = 0
    while stop_ids:
        index = min((_index(ids, token_id, start) for token_id in stop_ids), default=len(ids))
        if index >= len(ids):
            break
        if index >= params.min_new_tokens:
            return ids[: index + 1], index
        ids = ids[:index] + [_masked(stop_ids, vocab)] + ids[index + 1 :]
        start = index + 1
    return ids, None


def _index(ids: list[int], token_id: int, start: int) -> int:
    try:
        return ids.index(token_id, start)
    except ValueError:
        return len(ids)


def _masked(stop_ids: tuple[int, ...], vocab: Vocab) -> int:
    return next(token_id for token_id in vocab.normal_ids if token_id not in stop_ids)


def _first_stop_string(vocab: Vocab, ids: list[int], stops: tuple[str, ...]) -> tuple[int | None, str | None]:
    """Return (number of ids through the token completing the first stop string, that string)."""
    if not any(stop in vocab.decode(ids, skip_special_tokens=False) for stop in stops):
        return None, None
    low, high = 1, len(ids)
    while low < high:
        middle = (low + high) // 2
        if any(stop in vocab.decode(ids[:middle], skip_special_tokens=False) for stop in stops):
            high = middle
        else:
            low = middle + 1
    text = vocab.decode(ids[:low], skip_special_tokens=False)
    matched = min((stop for stop in stops if stop in text), key=text.find)
    return low, matched
