"""Regenerated multi-turn conversations: each assistant turn from the model's own earlier turns.

Pure library (no Kafka): :func:`start` builds a conversation's first prompt, :func:`continue_after`
builds the next prompt from a turn's exact output ids, in one of two history modes:

* ``rerender``: earlier outputs become assistant messages (reasoning split at the tokenizer's think
  markers by token id, tool calls parsed by a named format), cached tool results are paired in
  order, and the whole conversation is rendered with the chat template.
* ``tokens``: the next prompt is the previous prompt ids + the output ids + the template's token
  suffix for the following messages, checked to be prefix-stable.

See docs/CONVERSATIONS.md.
"""

from eaglefeed.chat.conversation.ids import conversation_id, turn_prompt_id
from eaglefeed.chat.conversation.reasons import REASONS, RECORD_TOO_LARGE, TRUNCATED
from eaglefeed.chat.conversation.state import HISTORY_MODES, OUTCOMES, ConversationState, Ended, NextPrompt
from eaglefeed.chat.conversation.toolcalls import TOOL_CALL_FORMATS
from eaglefeed.chat.conversation.turns import continue_after, first_messages, start

__all__ = ["HISTORY_MODES", "OUTCOMES", "REASONS", "RECORD_TOO_LARGE", "TOOL_CALL_FORMATS", "TRUNCATED",
           "ConversationState", "Ended",
           "NextPrompt", "continue_after", "conversation_id", "first_messages", "start",
           "turn_prompt_id"]
