"""SGLang 0.5.23's hidden-state contract on ``/generate``, served with labelled values (no model).

What SGLang does, with file:line, is in ``docs/journal/sglang-aux-hidden-states.md``; the stand-in
follows it:

- Server flags: ``--enable-return-hidden-states`` (last layer), ``--return-hidden-states-mode``,
  ``--enable-return-aux-hidden-states --speculative-algorithm EAGLE3
  [--return-aux-hidden-state-layer-ids J ...]`` (aux layers concatenated in place of the last layer).
- Request: ``return_hidden_states: true`` (or a list of booleans, one per prompt of a batch).
- Response: ``meta_info.hidden_states`` = the first ``completion_tokens`` entries of
  ``[prefill block, row, row, ...]``: the block holds one row per *computed* prompt position
  (from ``cached_tokens``, or from the last chunk's start under chunked prefill, to the prompt's
  end), then one row per decoded token but the last. Streaming chunks carry the cumulative list.

The values are labelled, not a model's: the state of layer ``k`` (vLLM's convention: the
residual stream entering decoder layer ``k``; ``N`` for the last-layer mode) at position ``p``
whose token is ``t``, dimension ``d``, is ``value(t, p, k, d)`` below. Every value is a multiple
of 1/64 in [-127/64, 127/64], exact in fp32, fp16 and bf16.
"""

from __future__ import annotations

from typing import Any, Protocol


class StandinConfig(Protocol):
    """The stand-in settings this module reads (``eaglefeed.devtools.standin.config.StandinConfig``).

    A protocol rather than an import: the config validates itself through this module.
    """

    @property
    def enable_return_hidden_states(self) -> bool: ...  # noqa: D102

    @property
    def enable_return_aux_hidden_states(self) -> bool: ...  # noqa: D102

    @property
    def return_hidden_states_mode(self) -> str | None: ...  # noqa: D102

    @property
    def return_aux_hidden_state_layer_ids(self) -> tuple[int, ...] | None: ...  # noqa: D102

    @property
    def speculative_algorithm(self) -> str | None: ...  # noqa: D102

    @property
    def chunked_prefill_size(self) -> int: ...  # noqa: D102

    @property
    def num_hidden_layers(self) -> int: ...  # noqa: D102

    @property
    def hidden_size(self) -> int: ...  # noqa: D102


CAPTURE_METHODS = ("EAGLE3", "DFLASH", "DSPARK")
"""The conventions SGLang's ``--speculative-algorithm`` may name with the aux flag (EAGLE3 emulated)."""

NOT_CONFIGURED_MESSAGE = (
    "The server is not configured to return hidden states. "
    "Please set `--return-hidden-states-mode last`, "
    "`--return-hidden-states-mode full`, or the legacy "
    "`--enable-return-hidden-states` flag."
)
"""SGLang 0.5.23's 400 text when a request asks and the server captures nothing."""

EXCEEDS_LAST_MESSAGE = (
    "The requested return_hidden_states mode exceeds the server maximum `last`. "
    "Please launch with `--return-hidden-states-mode full` to allow return_hidden_states=True."
)
"""SGLang 0.5.23's 400 text for ``return_hidden_states: true`` on a ``--return-hidden-states-mode last``
server."""


def value(token: int, position: int, layer: int, dim: int) -> float:
    """The stand-in's labelled hidden-state value (not a model's).

    ``((7*token + 13*position + 101*layer + 3*dim) mod 255 - 127) / 64``.
    """
    return ((7 * token + 13 * position + 101 * layer + 3 * dim) % 255 - 127) / 64


def server_mode(config: StandinConfig) -> str | None:
    """The resolved ``return_hidden_states_mode`` (SGLang's ``handle_return_hidden_states_mode``)."""
    if config.return_hidden_states_mode is not None:
        return config.return_hidden_states_mode
    if config.enable_return_hidden_states or config.enable_return_aux_hidden_states:
        return "full"
    return None


def captured_layers(config: StandinConfig) -> list[int]:
    """The layers whose states a row holds, in the row's order (ascending), in vLLM's ids.

    Id ``k`` is the residual stream entering decoder layer ``k``. SGLang captures at the input of
    the layers in ``layers_to_capture`` (``[2, N//2, N-3]`` by default, ``j + 1`` for an explicit
    id ``j``), in the forward loop's order, so a row's layers ascend whatever order was given.
    Without the aux flag a row is the last layer, labelled ``N``.
    """
    n = config.num_hidden_layers
    if not config.enable_return_aux_hidden_states:
        return [n]
    ids = config.return_aux_hidden_state_layer_ids
    wanted = [2, n // 2, n - 3] if ids is None else [j + 1 for j in ids]
    return sorted({k for k in wanted if 0 <= k < n})


def check_capture_config(config: StandinConfig) -> None:
    """Refuse the flag combinations SGLang 0.5.23 refuses at start-up, with its messages.

    Raises:
        ValueError: SGLang's text (``validation_hook.py`` ``handle_aux_hidden_state_capture``,
            ``spec_aux_hidden_state.py`` ``_check_capture_layer_ids_in_range``, and the first
            forward's ``logits_processor.py`` ``_check_aux_hidden_states``), or the stand-in's for
            what it does not emulate.
    """
    if config.num_hidden_layers < 1 or config.hidden_size < 1:
        raise ValueError("num_hidden_layers and hidden_size must be >= 1")
    if config.chunked_prefill_size == 0 or config.chunked_prefill_size < -1:
        raise ValueError("chunked_prefill_size must be -1 (off) or >= 1")
    if config.return_hidden_states_mode not in (None, "last", "full"):
        raise ValueError("return_hidden_states_mode must be one of: None, 'last', or 'full'.")
    ids = config.return_aux_hidden_state_layer_ids
    if not config.enable_return_aux_hidden_states:
        if ids is not None:
            raise ValueError(
                "--return-aux-hidden-state-layer-ids requires --enable-return-aux-hidden-states."
            )
        if config.speculative_algorithm is not None:
            raise ValueError(
                "the eaglefeed SGLang stand-in runs no speculative decoding: --speculative-algorithm "
                "only goes with --enable-return-aux-hidden-states"
            )
        return
    method = (config.speculative_algorithm or "").upper()
    if method not in CAPTURE_METHODS:
        raise ValueError(
            "--enable-return-aux-hidden-states needs --speculative-algorithm EAGLE3, DFLASH or DSPARK "
            f"to name the capture convention, got {config.speculative_algorithm!r}."
        )
    if method != "EAGLE3":
        raise ValueError(f"the eaglefeed SGLang stand-in emulates only the EAGLE3 capture convention, "
                         f"not {method}")
    if ids is not None:
        if len(ids) == 0:
            raise ValueError("--return-aux-hidden-state-layer-ids must not be empty.")
        if any(j < 0 for j in ids):
            raise ValueError(f"--return-aux-hidden-state-layer-ids must be non-negative, got {list(ids)}.")
        if len(set(ids)) != len(ids):
            raise ValueError(f"--return-aux-hidden-state-layer-ids must not repeat a layer, got {list(ids)}.")
        n = config.num_hidden_layers
        out_of_range = [j for j in ids if j >= n]
        if out_of_range:
            raise ValueError(
                f"--return-aux-hidden-state-layer-ids {out_of_range} out of range for a target with "
                f"{n} layers."
            )
        captured = len(captured_layers(config))
        if captured != len(ids):  # SGLang finds this at the first forward: id N-1 names no layer input
            raise ValueError(
                f"The model captured {captured:g} aux hidden states, but --return-aux-hidden-state-layer-ids "
                f"names {len(ids)} layers. A layer this model cannot capture, usually its last layer, is the "
                "likely cause."
            )


def requested(raw: Any, batch: int, is_batch: bool) -> list[bool]:
    """Per prompt, whether the request's ``return_hidden_states`` asks (the schema gate typed it).

    Raises:
        ValueError: a list whose length is not the batch size (SGLang's text).
    """
    if raw is None:
        return [False] * batch
    if isinstance(raw, list):
        if not is_batch:
            raise ValueError("return_hidden_states is a list for a single prompt: the eaglefeed SGLang "
                             "stand-in refuses it (SGLang's scheduler would fail on it)")
        if len(raw) != batch:
            raise ValueError("The length of return_hidden_states should be equal to the batch size.")
        return [bool(x) for x in raw]
    return [bool(raw)] * batch


def check_requested(asked: list[bool], config: StandinConfig | None) -> None:
    """Refuse a request asking for states the server does not capture (SGLang's ``_validate_one_request``).

    Raises:
        ValueError: SGLang's 400 text.
    """
    if not any(asked):
        return
    mode = None if config is None else server_mode(config)
    if mode == "full":
        return
    raise ValueError(EXCEEDS_LAST_MESSAGE if mode == "last" else NOT_CONFIGURED_MESSAGE)


def first_row_position(prompt_len: int, cached_tokens: int, chunked_prefill_size: int) -> int:
    """The first prompt position of the returned prefill block.

    SGLang returns rows for the positions its prefill computed (``extend_input_len``), so a
    prefix-cache hit drops the cached positions; under chunked prefill only the last chunk's
    rows are kept (middle chunks are processed with ``store=False``). The stand-in cuts the
    uncached part into chunks of exactly ``chunked_prefill_size`` from ``cached_tokens``; SGLang's
    boundaries also depend on the batch's token budget.
    """
    if chunked_prefill_size < 1:
        return cached_tokens
    uncached = prompt_len - cached_tokens
    return cached_tokens + (max(uncached, 1) - 1) // chunked_prefill_size * chunked_prefill_size


def hidden_states(
    input_ids: list[int], output_ids: list[int], *, first: int, count: int, layers: list[int], width: int
) -> list[Any]:
    """``meta_info.hidden_states`` for a sequence with ``count`` visible output ids.

    Args:
        input_ids: the prompt.
        output_ids: at least ``count`` output ids.
        first: the first prompt position of the prefill block.
        count: visible output ids (``completion_tokens``): the list has this many entries.
        layers: the row's layers, in order.
        width: the hidden size H.

    Returns:
        ``[]`` when ``count`` is 0, else ``[block, row_P, ..., row_{P+count-2}]`` where ``block``
        is the rows of positions ``first .. P-1`` (P = prompt length) and a row is
        ``len(layers) * width`` floats: layer-major, ``value(t, p, k, d)``.
    """
    if count <= 0:
        return []
    prompt_len = len(input_ids)

    def row(position: int, token: int) -> list[float]:
        return [value(token, position, k, d) for k in layers for d in range(width)]

    block = [row(p, input_ids[p]) for p in range(first, prompt_len)]
    rows = [row(prompt_len + i, output_ids[i]) for i in range(count - 1)]
    return [block, *rows]


def server_info_keys(config: StandinConfig) -> dict[str, Any]:
    """The ``/server_info`` keys SGLang 0.5.23 reports for these flags (its resolved server args)."""
    aux = config.enable_return_aux_hidden_states
    ids = config.return_aux_hidden_state_layer_ids
    return {
        "enable_return_hidden_states": config.enable_return_hidden_states
        or config.return_hidden_states_mode is not None,
        "return_hidden_states_mode": server_mode(config),
        "enable_return_aux_hidden_states": aux,
        "aux_hidden_state_capture": (config.speculative_algorithm or "").lower() if aux else None,
        "return_aux_hidden_state_layer_ids": None if ids is None else list(ids),
        "speculative_algorithm": None,
        "chunked_prefill_size": config.chunked_prefill_size,
    }
