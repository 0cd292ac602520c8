"""Stable codes for how a conversation ends; metrics and events use them as labels."""

from __future__ import annotations

COMPLETE = "complete"
TRUNCATED = "truncated"

# complete
USER_TURNS_DONE = "user_turns_done"  # no user (or cached tool) message is left to answer
# truncated
LENGTH = "length"  # the turn ended in finish_reason length (or abort): no closed answer to build on
MAX_TURNS = "max_turns"  # --max-turns turns were generated
TOOL_CALL_UNPARSABLE = "tool_call_unparsable"  # a call in the output is not valid for its format
TOOL_CALL_UNKNOWN_FORMAT = "tool_call_unknown_format"  # the run names a format no parser has
TOOL_CALL_MISMATCH = "tool_call_mismatch"  # a call's name differs from its cached result's, or the counts do
TOOL_CALL_WITHOUT_RESULT = "tool_call_without_result"  # the source has no cached result for a call
TOOL_RESULT_WITHOUT_CALL = "tool_result_without_call"  # cached results follow a turn that made no call
# No longer produced (parallel calls pair in order); kept because old rows and events carry it.
PARALLEL_TOOL_CALLS = "parallel_tool_calls"
NOT_PREFIX_STABLE = "not_prefix_stable"  # tokens mode: the template's suffix is not token-stable
TEMPLATE_ERROR = "template_error"  # the chat template rejected the conversation
PROMPT_TOO_LONG = "prompt_too_long"  # the next prompt exceeds the run's prompt cap (checked by the stage)
UNKNOWN_FINISH = "unknown_finish_reason"  # the engine's finish reason is neither stop nor length
RECORD_TOO_LARGE = "record_too_large"  # the broker refused the next prompt (too large; the stage)

REASONS = (USER_TURNS_DONE, LENGTH, MAX_TURNS, TOOL_CALL_UNPARSABLE, TOOL_CALL_UNKNOWN_FORMAT,
           TOOL_CALL_MISMATCH, TOOL_CALL_WITHOUT_RESULT, TOOL_RESULT_WITHOUT_CALL, PARALLEL_TOOL_CALLS,
           NOT_PREFIX_STABLE, TEMPLATE_ERROR, PROMPT_TOO_LONG, UNKNOWN_FINISH, RECORD_TOO_LARGE)
