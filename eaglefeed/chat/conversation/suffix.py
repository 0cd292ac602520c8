r"""``tokens`` mode: the ids the chat template adds after a generated turn, checked to be stable.

The next prompt is ``prompt_ids + output_ids + suffix``. The suffix is what the template renders
after the assistant's content for the following messages and the generation prompt. It is found
by rendering the conversation with a sentinel assistant content, once without and once with the
following messages, and taking what comes after the sentinel:

* without: the assistant's closing (e.g. ``<|im_end|>\\n``, or its tool calls and closing);
* with: the same closing, then the following messages and the generation prompt.

Only what follows the sentinel must be stable: a template may render the earlier assistant turn
itself differently once a user message follows (Qwen3-style templates drop its reasoning), and
that does not matter here, because the exact ids of that turn are kept. Stability is checked at
the token level: the closing's tokens must be a prefix of the tokens after the sentinel, and the
ids appended must meet the output at an added token (the output's stop token, or an added token
that starts the suffix). A model may also stop at the token that opens the next message (GLM-4.5
stops at ``<|observation|>`` or ``<|user|>``): when that token is what follows the closing, the
suffix starts after it. Tokenizers split text at added tokens before anything else, so the
appended ids are then exactly the ids of that text in any context. The part of the closing the
model produced itself (its stop token) is dropped. Anything else is ``not_prefix_stable``: this
module never guesses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from eaglefeed.chat.conversation.markers import SplitMarkers

SENTINEL = "EAGLEFEEDsentinel7c1e4b"

Message = dict[str, Any]
RenderText = Callable[[list[Message], bool], str]  # (messages, add_generation_prompt) -> text
Tokenize = Callable[[str], list[int]]


class NotPrefixStable(ValueError):
    """The template's suffix for these messages cannot be taken as a token suffix."""


def token_suffix(*, context: Sequence[Mapping[str, Any]], tool_calls: list[Message],
                 following: Sequence[Mapping[str, Any]], output_ids: list[int], markers: SplitMarkers,
                 render_text: RenderText, tokenize: Tokenize) -> list[int]:
    """The ids to append to ``prompt_ids + output_ids`` for the next prompt.

    Args:
        context: the messages before the generated turn (the template may look at them).
        tool_calls: the turn's calls as OpenAI ``tool_calls`` (rendered by the template).
        following: the messages after the turn (cached tool results, user messages).
        output_ids: the turn's exact output ids.
        markers: the tokenizer's markers (to tell a stop token).
        render_text: renders messages to text with the run's tools and template kwargs.
        tokenize: text to ids exactly as the renderer tokenizes (no special tokens added).

    Raises:
        NotPrefixStable: with the detail of which check failed.
    """
    sentinel: Message = {"role": "assistant", "content": SENTINEL}
    if tool_calls:
        sentinel["tool_calls"] = tool_calls
    head = [dict(m) for m in context] + [sentinel]
    without = render_text(head, False)
    with_ = render_text(head + [dict(m) for m in following], True)
    closing_text = _after_sentinel(without, "without")
    tail_text = _after_sentinel(with_, "with")
    if not tail_text.startswith(closing_text):
        raise NotPrefixStable("the assistant's closing changes when messages follow")
    tail_ids = tokenize(tail_text)
    closing_ids = tokenize(closing_text)
    if tail_ids[:len(closing_ids)] != closing_ids:
        raise NotPrefixStable("the closing's tokens change when messages follow")
    rest = tail_ids[len(closing_ids):]
    last = output_ids[-1] if output_ids else None
    if last is not None and last in markers.special and last not in closing_ids and rest[:1] == [last]:
        # The model stopped at the token that opens the next message (GLM-4.5 ends a turn with
        # <|observation|> before tool results, <|user|> before a user turn): it is the output's.
        suffix = rest[1:]
    else:
        suffix = _after_stop(closing_ids, output_ids, markers, bool(tool_calls)) + rest
    joint = output_ids[-1:] + suffix[:1]
    if suffix and not any(i in markers.added for i in joint):
        raise NotPrefixStable("the output and the suffix do not meet at an added token")
    return suffix


def _after_sentinel(text: str, which: str) -> str:
    if text.count(SENTINEL) != 1:
        raise NotPrefixStable(f"the template does not render the assistant content once ({which})")
    return text[text.index(SENTINEL) + len(SENTINEL):]


def _after_stop(closing_ids: list[int], output_ids: list[int], markers: SplitMarkers,
                has_calls: bool) -> list[int]:
    """The part of the template's closing that the model did not produce itself."""
    last = output_ids[-1] if output_ids else None
    if last is not None and last in markers.special:
        if last not in closing_ids:
            raise NotPrefixStable(f"the turn ended with token {last}, which the template's closing lacks")
        cut = len(closing_ids) - closing_ids[::-1].index(last)
        return closing_ids[cut:]
    if has_calls:
        # The closing also renders the calls; without a stop token the model's share is unknown.
        raise NotPrefixStable("a turn with tool calls did not end with a stop token")
    return closing_ids
