"""The sampling settings every request sends explicitly, so no server default can change a row.

SGLang 0.5.23 merges its ``--preferred-sampling-params`` *under* each request
(``{**preferred_sampling_params, **obj.sampling_params}`` in
``srt/managers/tokenizer_manager.py`` ``_create_tokenized_object``): a key the request sends wins,
a key it leaves out takes the server's preference (a ``repetition_penalty``, ``min_new_tokens``,
``ignore_eos`` ...). vLLM's ``/v1/completions`` fills every omitted key of
``repetition_penalty``, ``presence_penalty``, ``frequency_penalty``, ``temperature``, ``top_k``,
``top_p``, ``min_p`` from the model's ``generation_config.json`` (``ModelConfig.get_diff_sampling_param``
in ``vllm/config/model.py``). So every request carries :data:`NEUTRAL` as well as the row's own
settings, and :func:`override_problem` names a server preference that a request still would not
override (a key outside what we send), which stops the worker at start-up in one line.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

NEUTRAL: dict[str, Any] = {
    "frequency_penalty": 0.0,
    "presence_penalty": 0.0,
    "repetition_penalty": 1.0,
    "min_new_tokens": 0,
    "ignore_eos": False,
    "n": 1,
    "stop_token_ids": [],
}
"""Values that leave sampling as the row says; a row's own ``stop_token_ids`` or ``n`` replace them."""

ROW_KEYS = ("max_new_tokens", "temperature", "top_p", "top_k", "min_p", "sampling_seed")
"""The settings a PromptRecord decides (``sampling_seed`` is derived from its seed)."""

TEXT_ONLY: dict[str, Any] = {"skip_special_tokens": False, "no_stop_trim": True}
"""SGLang settings that touch only ``text`` (kept visible for debugging), never the ids."""

SENT_KEYS = frozenset((*ROW_KEYS, *NEUTRAL, *TEXT_ONLY))
"""Every key each SGLang request sends: a server preference for any other key would apply."""

# Preferences that change nothing the row records: text-only rendering and stream chunking.
_HARMLESS = frozenset({"spaces_between_special_tokens", "stream_interval"})


def override_problem(preferred: object, *, sent: Collection[str] = SENT_KEYS) -> str | None:
    """Why a server's preferred sampling params would change what a row records (None: they cannot).

    Args:
        preferred: the server's ``preferred_sampling_params`` (SGLang ``/model_info``), a dict or None.
        sent: the keys every request carries (each overrides the server's preference for it).
    """
    if not preferred:
        return None
    if not isinstance(preferred, Mapping):
        return f"preferred_sampling_params is not an object: {preferred!r}"[:300]
    applied = {k: v for k, v in preferred.items() if k not in sent and k not in _HARMLESS and v is not None}
    if not applied:
        return None
    listed = ", ".join(f"{k}={v!r}" for k, v in sorted(applied.items()))
    return (f"the server's --preferred-sampling-params set {listed}, which every request would take "
            f"without the rows recording it")
