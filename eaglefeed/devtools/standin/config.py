"""Every knob of the SGLang stand-in in one frozen dataclass (its field defaults are the defaults)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LATENCY_MODELS = ("batching", "none")
SEED_MODES = ("always", "deterministic", "ignored")

FAULT_KINDS = ("503", "500", "reset", "hang", "abort", "contaminate")
"""Injectable faults, in the order they are drawn (the first hit wins)."""


@dataclass(frozen=True, kw_only=True)
class FaultRates:
    """Per-request probabilities of each injected fault, each in [0, 1].

    Attributes:
        http_503: answer 503 with SGLang's queue-full envelope.
        http_500: answer 500 with SGLang's error envelope.
        reset: write part of the response, then reset the TCP connection.
        hang: sleep ``hang_seconds`` before answering (past any sane client timeout).
        abort: finish with ``{"type": "abort", ...}`` after part of the output.
        contaminate: emulate SGLang bug #10896: up to 5 prompt-suffix ids lead ``output_ids``.
        hang_seconds: how long a hang lasts.
        seed: seed of the per-request fault draw (reproducible runs).
    """

    http_503: float = 0.0
    http_500: float = 0.0
    reset: float = 0.0
    hang: float = 0.0
    abort: float = 0.0
    contaminate: float = 0.0
    hang_seconds: float = 3600.0
    seed: int = 0

    def __post_init__(self) -> None:
        """Reject rates outside [0, 1]."""
        for kind, rate in self.by_kind().items():
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"fault rate for {kind!r} must be in [0, 1], got {rate}")
        if self.hang_seconds < 0:
            raise ValueError(f"hang_seconds must be >= 0, got {self.hang_seconds}")

    def by_kind(self) -> dict[str, float]:
        """Return the rates keyed by fault kind, in draw order."""
        return {
            "503": self.http_503,
            "500": self.http_500,
            "reset": self.reset,
            "hang": self.hang,
            "abort": self.abort,
            "contaminate": self.contaminate,
        }

    @property
    def enabled(self) -> bool:
        """True when any fault can be injected."""
        return any(rate > 0 for rate in self.by_kind().values())


@dataclass(frozen=True, kw_only=True)
class StandinConfig:
    """Configuration of one stand-in server.

    Attributes:
        host: interface to listen on.
        port: TCP port to listen on.
        tokenizer: directory holding ``tokenizer.json`` (and optionally ``tokenizer_config.json``),
            or another tokenizer transformers loads (Kimi's tiktoken one).
        trust_remote_code: a tokenizer without tokenizer.json may run its own Python code.
        model_path: reported as ``model_path`` in ``/model_info``.
        served_model_name: ``model_name`` label of the metrics; ``model_path`` when None.
        weight_version: reported in ``meta_info.weight_version`` and ``/model_info``.
        context_length: maximum prompt + output tokens.
        max_running_requests: decode slots of the continuous-batching model.
        max_queued_requests: waiting-queue bound (503 beyond it); unbounded when None.
        max_total_num_tokens: KV pool size reported in ``/server_info`` and used for
            ``sglang:token_usage``; ``context_length * max_running_requests`` when None.
        latency_model: ``batching`` (scheduler steps with sleeps) or ``none`` (answer at once).
        prefill_ms_per_token: prefill cost per uncached prompt token.
        decode_step_ms: fixed cost of one decode step.
        decode_step_ms_per_running: extra decode-step cost per running request.
        output_len_mean: mean of the lognormal natural output length, in tokens.
        output_len_sigma: sigma of that lognormal (0 = always the mean).
        think_fraction: share of responses that open with a ``<think>`` block.
        tool_call_fraction: share of responses to tool-bearing prompts with tool calls (never
            right after a tool response: the double answers its tool's result with text).
        parallel_tool_call_fraction: share of tool-call responses with two calls instead of one.
        tool_call_format: the format calls are written in (``toolformats.CALL_FORMATS``).
        length_fraction: share of responses that run until ``max_new_tokens``.
        incremental_streaming_output: stream deltas instead of cumulative output.
        prefix_cache_block_size: granularity of the emulated prefix cache; 0 disables it.
        prefix_cache_tokens: tokens this server's prefix cache holds (least recently used blocks go
            first); the KV pool (``max_total_num_tokens``) when None.
        random_seed: server-wide seed mixed into every output draw.
        api_key: when set, every route except /health* and /metrics needs a Bearer token.
        startup_seconds: how long health endpoints answer 503 after start.
        faults: fault-injection rates.
        preferred_sampling_params: SGLang's ``--preferred-sampling-params``: merged under every
            request's ``sampling_params`` (a key the request sends wins) and reported by
            ``/model_info``.
        seed_mode: ``always`` (the stand-in's own: every sample's draw follows ``sampling_seed``
            and its index); ``deterministic`` (SGLang with ``--enable-deterministic-inference``:
            the seed decides, so the ``n`` samples of one request, which share it, are identical);
            ``ignored`` (SGLang without it: ``sampling_seed`` has no effect, every request draws anew).
        health_check_timeout: seconds ``/health``'s one-token generation may take before it answers
            503 (SGLang's ``SGLANG_HEALTH_CHECK_TIMEOUT``).
        enable_return_hidden_states: SGLang's flag: ``return_hidden_states: true`` returns the
            last layer (labelled values, ``hidden_states``).
        return_hidden_states_mode: SGLang's ``--return-hidden-states-mode`` (``last`` or ``full``).
        enable_return_aux_hidden_states: SGLang's flag: ``return_hidden_states: true`` returns the
            aux layers concatenated instead (needs ``speculative_algorithm="EAGLE3"``).
        speculative_algorithm: with the aux flag, only names the capture convention (``EAGLE3``).
        return_aux_hidden_state_layer_ids: SGLang's explicit ids (id j captures decoder layer j's
            output); None: the EAGLE3 default ``[2, N//2, N-3]`` of layer inputs.
        num_hidden_layers: depth N of the stand-in's pretend model (no model exists).
        hidden_size: width H of its pretend hidden states.
        chunked_prefill_size: SGLang's flag (-1: off): a prompt's uncached part is prefilled in
            chunks of this many tokens, and only the last chunk's rows are returned, as in SGLang.
    """

    host: str = "127.0.0.1"
    port: int = 30000
    tokenizer: Path | None = None
    trust_remote_code: bool = False
    model_path: str = "eaglefeed/standin-demo"
    served_model_name: str | None = None
    weight_version: str = "default"
    context_length: int = 8192
    max_running_requests: int = 64
    max_queued_requests: int | None = None
    max_total_num_tokens: int | None = None
    latency_model: str = "batching"
    prefill_ms_per_token: float = 0.02
    decode_step_ms: float = 10.0
    decode_step_ms_per_running: float = 0.1
    output_len_mean: float = 200.0
    output_len_sigma: float = 0.8
    think_fraction: float = 0.3
    tool_call_fraction: float = 0.5
    parallel_tool_call_fraction: float = 0.3
    tool_call_format: str = "hermes"
    length_fraction: float = 0.05
    incremental_streaming_output: bool = False
    prefix_cache_block_size: int = 16
    prefix_cache_tokens: int | None = None
    random_seed: int = 0
    api_key: str | None = None
    startup_seconds: float = 0.0
    faults: FaultRates = field(default_factory=FaultRates)
    preferred_sampling_params: dict[str, Any] | None = None
    seed_mode: str = "always"
    health_check_timeout: float = 20.0
    enable_return_hidden_states: bool = False
    return_hidden_states_mode: str | None = None
    enable_return_aux_hidden_states: bool = False
    speculative_algorithm: str | None = None
    return_aux_hidden_state_layer_ids: tuple[int, ...] | None = None
    num_hidden_layers: int = 8
    hidden_size: int = 16
    chunked_prefill_size: int = -1

    def __post_init__(self) -> None:
        """Reject values the server cannot run with."""
        if self.seed_mode not in SEED_MODES:
            raise ValueError(f"seed_mode must be one of {SEED_MODES}, got {self.seed_mode!r}")
        if self.latency_model not in LATENCY_MODELS:
            raise ValueError(f"latency_model must be one of {LATENCY_MODELS}, got {self.latency_model!r}")
        if self.context_length < 2:
            raise ValueError("context_length must be at least 2")
        if self.max_running_requests < 1:
            raise ValueError("max_running_requests must be at least 1")
        if self.max_queued_requests is not None and self.max_queued_requests < 0:
            raise ValueError("max_queued_requests must be >= 0")
        fractions = ("think_fraction", "tool_call_fraction", "parallel_tool_call_fraction", "length_fraction")
        for name in fractions:
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        if self.tool_call_format not in CALL_FORMATS:
            raise ValueError(f"tool_call_format must be one of {CALL_FORMATS}, got {self.tool_call_format!r}")
        if self.output_len_mean < 1 or self.output_len_sigma < 0:
            raise ValueError("output_len_mean must be >= 1 and output_len_sigma >= 0")
        if self.prefix_cache_block_size < 0:
            raise ValueError("prefix_cache_block_size must be >= 0")
        if self.prefix_cache_tokens is not None and self.prefix_cache_tokens < 0:
            raise ValueError("prefix_cache_tokens must be >= 0")
        from eaglefeed.devtools.standin.hidden_states import check_capture_config

        check_capture_config(self)

    @property
    def model_name(self) -> str:
        """The served model name (``model_name`` metric label)."""
        return self.served_model_name or self.model_path

    @property
    def cache_tokens(self) -> int:
        """Capacity of the prefix cache in tokens."""
        return self.total_num_tokens if self.prefix_cache_tokens is None else self.prefix_cache_tokens

    @property
    def total_num_tokens(self) -> int:
        """The emulated KV pool size in tokens."""
        return self.max_total_num_tokens or self.context_length * self.max_running_requests


CALL_FORMATS = ("hermes", "kimi_k2", "deepseek_v3", "deepseek_v31", "glm45", "llama3_json", "mistral",
                "gpt_oss")
"""The tool-call formats the stand-in writes (``--tool-call-format``; none: ``--tool-call-fraction 0``)."""

STANDIN_VERSION = "0.0.0-eaglefeed-standin"
"""What ``/server_info`` reports as ``version``, so nobody mistakes the stand-in for SGLang."""
