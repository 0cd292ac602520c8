"""Tokenizers on this host: the one reader of their files, the table of marker spellings, remote code.

- :mod:`~eaglefeed.core.tokenizer.files` finds a tokenizer's files (a directory, else the Hugging
  Face cache, never the network) and reads them: JSON, special-token entries, added tokens;
- :mod:`~eaglefeed.core.tokenizer.markers` is the one table of think, reasoning-channel and
  tool-call spellings;
- :mod:`~eaglefeed.core.tokenizer.remote_code` loads a tokenizer, refusing its own Python code in
  one line unless trusted; :mod:`~eaglefeed.core.tokenizer.hub` asks once whether the hub is reachable;
- :mod:`~eaglefeed.core.tokenizer.models` says which model a tokenizer names, and whether two model
  names (a prompt's, a server's) are one model.
"""

from eaglefeed.core.tokenizer.files import (
    CONFIG_FILE,
    added_tokens,
    read_json,
    special_token,
    tokenizer_config,
    tokenizer_file,
)
from eaglefeed.core.tokenizer.markers import (
    HARMONY_ANALYSIS,
    HARMONY_CALL,
    HARMONY_CHANNEL,
    HARMONY_CONSTRAIN,
    HARMONY_END,
    HARMONY_MESSAGE,
    HARMONY_RETURN,
    HARMONY_START,
    HARMONY_TOKENS,
    REASONING_CHANNELS,
    REASONING_TOKENS,
    THINK_END,
    THINK_PAIRS,
    THINK_START,
    TOOL_CALL_END,
    TOOL_CALL_START,
    TOOL_CALL_TAGS,
    TOOL_CALL_TOKENS,
    TOOL_FORMAT_TAGS,
    reasoning_channel,
    think_pair,
)
from eaglefeed.core.tokenizer.models import model_name, same_model, tokenizer_model
from eaglefeed.core.tokenizer.remote_code import (
    TRUST_FLAG,
    RemoteCodeError,
    load_tokenizer,
    remote_code_class,
    remote_code_files,
    remote_code_refusal,
    runs_remote_code,
)

__all__ = [
    "CONFIG_FILE",
    "HARMONY_ANALYSIS",
    "HARMONY_CALL",
    "HARMONY_CHANNEL",
    "HARMONY_CONSTRAIN",
    "HARMONY_END",
    "HARMONY_MESSAGE",
    "HARMONY_RETURN",
    "HARMONY_START",
    "HARMONY_TOKENS",
    "REASONING_CHANNELS",
    "REASONING_TOKENS",
    "THINK_END",
    "THINK_PAIRS",
    "THINK_START",
    "TOOL_CALL_END",
    "TOOL_CALL_START",
    "TOOL_CALL_TAGS",
    "TOOL_CALL_TOKENS",
    "TOOL_FORMAT_TAGS",
    "TRUST_FLAG",
    "RemoteCodeError",
    "added_tokens",
    "load_tokenizer",
    "model_name",
    "read_json",
    "reasoning_channel",
    "remote_code_class",
    "remote_code_files",
    "remote_code_refusal",
    "runs_remote_code",
    "same_model",
    "special_token",
    "think_pair",
    "tokenizer_config",
    "tokenizer_file",
    "tokenizer_model",
]
