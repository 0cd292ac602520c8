"""Command-line flags of the stand-in, and ``run()`` for the CLI."""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import logging
import sys
from pathlib import Path

from eaglefeed.core.errors import ConfigError
from eaglefeed.devtools.standin.config import (
    CALL_FORMATS,
    LATENCY_MODELS,
    SEED_MODES,
    FaultRates,
    StandinConfig,
)

_D = StandinConfig()
_F = FaultRates()


def default_tokenizer_dir() -> Path | None:
    """Return the demo tokenizer shipped with eaglefeed, or None when it is not installed."""
    try:
        from eaglefeed.devtools.demo import TOKENIZER_DIR
    except ImportError:
        return None
    return Path(TOKENIZER_DIR)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add every stand-in flag to ``parser``.

    Args:
        parser: the (sub)command parser to extend.
    """
    server = parser.add_argument_group("server")
    server.add_argument("--host", default=_D.host, help="interface to listen on (default: %(default)s)")
    server.add_argument(
        "--port",
        type=int,
        default=_D.port,
        help="TCP port; 0 picks a free one (default: %(default)s)",
    )
    server.add_argument(
        "--tokenizer",
        "--tokenizer-path",
        dest="tokenizer",
        type=Path,
        default=default_tokenizer_dir(),
        help="tokenizer directory holding tokenizer.json (or a tokenizer transformers loads, such as "
        "Kimi's tiktoken one); must match the producer's tokenizer (default: %(default)s)",
    )
    server.add_argument(
        "--trust-remote-code",
        action="store_true",
        default=_D.trust_remote_code,
        help="load a tokenizer that runs its own Python code (an auto_map class, Kimi's kind) "
        "(default: off: such a tokenizer stops the stand-in with one line)",
    )
    server.add_argument(
        "--model-path", default=_D.model_path, help="reported by /model_info (default: %(default)s)"
    )
    server.add_argument(
        "--served-model-name",
        default=None,
        help="model_name metric label (default: the --model-path value)",
    )
    server.add_argument(
        "--weight-version",
        default=_D.weight_version,
        help="meta_info.weight_version (default: %(default)s)",
    )
    server.add_argument(
        "--api-key",
        default=None,
        help="require 'Authorization: Bearer KEY' except on /health* and /metrics (default: no key)",
    )
    server.add_argument(
        "--startup-seconds",
        type=float,
        default=_D.startup_seconds,
        help="health endpoints answer 503 for this long after start (default: %(default)s)",
    )
    server.add_argument(
        "--log-level",
        default="WARNING",
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="logging level (default: %(default)s)",
    )
    engine = parser.add_argument_group("engine")
    engine.add_argument(
        "--context-length",
        type=int,
        default=_D.context_length,
        help="prompt + output token limit (default: %(default)s)",
    )
    engine.add_argument(
        "--max-running-requests",
        type=int,
        default=_D.max_running_requests,
        help="continuous-batching slots (default: %(default)s)",
    )
    engine.add_argument(
        "--max-queued-requests",
        type=int,
        default=None,
        help="waiting-queue bound; beyond it /generate answers 503 (default: unbounded)",
    )
    engine.add_argument(
        "--max-total-tokens",
        type=int,
        default=None,
        help="emulated KV pool in tokens, for /server_info and sglang:token_usage "
        "(default: context length x max running requests)",
    )
    engine.add_argument(
        "--prefix-cache-block-size",
        type=int,
        default=_D.prefix_cache_block_size,
        help="block size of the emulated prefix cache behind cached_tokens; 0 disables it "
        "(default: %(default)s)",
    )
    engine.add_argument(
        "--prefix-cache-tokens",
        type=int,
        default=None,
        help="tokens this server's prefix cache holds, least recently used evicted first "
        "(default: the KV pool, --max-total-tokens)",
    )
    engine.add_argument(
        "--preferred-sampling-params",
        type=json.loads,
        default=None,
        metavar="JSON",
        help="as SGLang's: sampling params merged under every request's (default: none)",
    )
    engine.add_argument(
        "--seed-mode",
        choices=SEED_MODES,
        default=_D.seed_mode,
        help="always: sampling_seed and the sample index decide each draw (the stand-in's own); "
        "deterministic: SGLang with --enable-deterministic-inference (n samples share the seed); "
        "ignored: SGLang without it (default: %(default)s)",
    )
    engine.add_argument(
        "--health-check-timeout",
        type=float,
        default=_D.health_check_timeout,
        help="seconds /health's one-token generation may take before it answers 503, as "
        "SGLANG_HEALTH_CHECK_TIMEOUT (default: %(default)s)",
    )
    engine.add_argument(
        "--incremental-streaming-output",
        action="store_true",
        help="stream deltas of text/output_ids instead of cumulative values (default: off)",
    )
    latency = parser.add_argument_group("latency model")
    latency.add_argument(
        "--latency-model",
        choices=LATENCY_MODELS,
        default=_D.latency_model,
        help="'batching' steps a continuous-batching engine; 'none' answers at once (default: %(default)s)",
    )
    latency.add_argument(
        "--prefill-ms-per-token",
        type=float,
        default=_D.prefill_ms_per_token,
        help="prefill cost per uncached prompt token, ms (default: %(default)s)",
    )
    latency.add_argument(
        "--decode-step-ms",
        type=float,
        default=_D.decode_step_ms,
        help="fixed cost of a decode step, ms (default: %(default)s)",
    )
    latency.add_argument(
        "--decode-step-ms-per-running",
        type=float,
        default=_D.decode_step_ms_per_running,
        help="extra decode-step cost per running request, ms (default: %(default)s)",
    )
    _add_output_arguments(parser)
    _add_hidden_state_arguments(parser)
    _add_fault_arguments(parser)


def _add_hidden_state_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "hidden states (SGLang's flags; the values are labelled, not a model's: docs/STANDIN.md)"
    )
    group.add_argument(
        "--enable-return-hidden-states",
        action="store_true",
        help="return_hidden_states: true returns the last layer in meta_info.hidden_states (default: off)",
    )
    group.add_argument(
        "--return-hidden-states-mode",
        choices=("last", "full"),
        default=None,
        help="SGLang's maximum mode; 'last' refuses return_hidden_states: true (default: full with "
        "either enable flag, else none)",
    )
    group.add_argument(
        "--enable-return-aux-hidden-states",
        action="store_true",
        help="return_hidden_states: true returns the aux layers concatenated instead; needs "
        "--speculative-algorithm EAGLE3 (default: off)",
    )
    group.add_argument(
        "--speculative-algorithm",
        default=None,
        help="with --enable-return-aux-hidden-states: the capture convention, EAGLE3 (default: none)",
    )
    group.add_argument(
        "--return-aux-hidden-state-layer-ids",
        type=int,
        nargs="+",
        default=None,
        metavar="J",
        help="SGLang ids j (decoder layer j's output = vLLM id j+1), below N-1 (default: the EAGLE3 "
        "layer inputs 2, N//2, N-3)",
    )
    group.add_argument(
        "--num-hidden-layers",
        type=int,
        default=_D.num_hidden_layers,
        help="depth N of the stand-in's pretend model (default: %(default)s)",
    )
    group.add_argument(
        "--hidden-size",
        type=int,
        default=_D.hidden_size,
        help="width H of its pretend hidden states (default: %(default)s)",
    )
    group.add_argument(
        "--chunked-prefill-size",
        type=int,
        default=_D.chunked_prefill_size,
        help="prefill chunk in tokens; only the last chunk's rows are returned, as in SGLang; -1 = off "
        "(default: %(default)s)",
    )


def _add_output_arguments(parser: argparse.ArgumentParser) -> None:
    output = parser.add_argument_group("output model")
    output.add_argument(
        "--output-len-mean",
        type=float,
        default=_D.output_len_mean,
        help="mean natural output length in tokens, lognormal (default: %(default)s)",
    )
    output.add_argument(
        "--output-len-sigma",
        type=float,
        default=_D.output_len_sigma,
        help="sigma of the lognormal output length; 0 = fixed (default: %(default)s)",
    )
    output.add_argument(
        "--think-fraction",
        type=float,
        default=_D.think_fraction,
        help="share of responses opening with <think>...</think> unless the prompt disabled "
        "thinking "
        "(default: %(default)s)",
    )
    output.add_argument(
        "--tool-call-fraction",
        type=float,
        default=_D.tool_call_fraction,
        help="share of responses to tool-bearing prompts that emit tool calls, naming tools the prompt "
        "declares (as the --tool-call-format family's template does); never right after a tool response "
        "(default: %(default)s)",
    )
    output.add_argument(
        "--parallel-tool-call-fraction",
        type=float,
        default=_D.parallel_tool_call_fraction,
        help="share of tool-call responses with two calls instead of one (default: %(default)s)",
    )
    output.add_argument(
        "--tool-call-format",
        choices=CALL_FORMATS,
        default=_D.tool_call_format,
        help="how calls are written, with the served tokenizer's ids: hermes <tool_call>{json}</tool_call>, "
        "kimi_k2, deepseek_v3, deepseek_v31, glm45, llama3_json, mistral or gpt_oss (Harmony: its "
        "reasoning and answers are Harmony messages too) (default: %(default)s)",
    )
    output.add_argument(
        "--length-fraction",
        type=float,
        default=_D.length_fraction,
        help="share of responses that never stop and end at max_new_tokens (default: %(default)s)",
    )
    output.add_argument(
        "--random-seed",
        type=int,
        default=_D.random_seed,
        help="server-wide seed mixed into every output draw (default: %(default)s)",
    )


def _add_fault_arguments(parser: argparse.ArgumentParser) -> None:
    faults = parser.add_argument_group("fault injection (per /generate request, rates in [0, 1])")
    rates = (
        ("--fault-503-rate", "answer 503 with SGLang's queue-full envelope"),
        ("--fault-500-rate", "answer 500 with SGLang's error envelope"),
        ("--fault-reset-rate", "send half the response, then reset the connection"),
        ("--fault-hang-rate", "sleep --fault-hang-seconds before answering"),
        ("--fault-abort-rate", "finish with an abort finish_reason after half the output"),
        ("--fault-contaminate-rate", "SGLang bug #10896: prompt-suffix ids lead output_ids"),
    )
    for flag, what in rates:
        faults.add_argument(flag, type=float, default=0.0, help=f"{what} (default: %(default)s)")
    faults.add_argument(
        "--fault-hang-seconds",
        type=float,
        default=_F.hang_seconds,
        help="length of a hang (default: %(default)s)",
    )
    faults.add_argument(
        "--fault-seed",
        type=int,
        default=_F.seed,
        help="seed of the per-request fault draw; same seed + request order = same faults "
        "(default: %(default)s)",
    )


def config_from_args(args: argparse.Namespace) -> StandinConfig:
    """Build the frozen config from parsed flags.

    Raises:
        ValueError: for values the stand-in cannot run with.
    """
    return StandinConfig(
        host=args.host,
        port=args.port,
        tokenizer=args.tokenizer,
        trust_remote_code=args.trust_remote_code,
        model_path=args.model_path,
        served_model_name=args.served_model_name,
        weight_version=args.weight_version,
        context_length=args.context_length,
        max_running_requests=args.max_running_requests,
        max_queued_requests=args.max_queued_requests,
        max_total_num_tokens=args.max_total_tokens,
        latency_model=args.latency_model,
        prefill_ms_per_token=args.prefill_ms_per_token,
        decode_step_ms=args.decode_step_ms,
        decode_step_ms_per_running=args.decode_step_ms_per_running,
        output_len_mean=args.output_len_mean,
        output_len_sigma=args.output_len_sigma,
        think_fraction=args.think_fraction,
        tool_call_fraction=args.tool_call_fraction,
        parallel_tool_call_fraction=args.parallel_tool_call_fraction,
        tool_call_format=args.tool_call_format,
        length_fraction=args.length_fraction,
        incremental_streaming_output=args.incremental_streaming_output,
        prefix_cache_block_size=args.prefix_cache_block_size,
        prefix_cache_tokens=args.prefix_cache_tokens,
        random_seed=args.random_seed,
        api_key=args.api_key,
        startup_seconds=args.startup_seconds,
        preferred_sampling_params=args.preferred_sampling_params,
        seed_mode=args.seed_mode,
        health_check_timeout=args.health_check_timeout,
        enable_return_hidden_states=args.enable_return_hidden_states,
        return_hidden_states_mode=args.return_hidden_states_mode,
        enable_return_aux_hidden_states=args.enable_return_aux_hidden_states,
        speculative_algorithm=args.speculative_algorithm,
        return_aux_hidden_state_layer_ids=(
            None if args.return_aux_hidden_state_layer_ids is None
            else tuple(args.return_aux_hidden_state_layer_ids)
        ),
        num_hidden_layers=args.num_hidden_layers,
        hidden_size=args.hidden_size,
        chunked_prefill_size=args.chunked_prefill_size,
        faults=FaultRates(
            http_503=args.fault_503_rate,
            http_500=args.fault_500_rate,
            reset=args.fault_reset_rate,
            hang=args.fault_hang_rate,
            abort=args.fault_abort_rate,
            contaminate=args.fault_contaminate_rate,
            hang_seconds=args.fault_hang_seconds,
            seed=args.fault_seed,
        ),
    )


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; return the exit code (0 on a clean stop, 2 on bad flags)."""
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from eaglefeed.devtools.standin.vocab import load_vocab  # tokenizers loads only when serving

    try:
        config = config_from_args(args)
        folder = config.tokenizer
        names = ("tokenizer.json", "tokenizer_config.json")
        if folder is None or not any((folder / name).is_file() for name in names):
            raise ValueError(
                f"--tokenizer must name a directory holding tokenizer.json or tokenizer_config.json, "
                f"got {folder}"
            )
        vocab = load_vocab(folder, trust_remote_code=config.trust_remote_code)
    except (OSError, ValueError, ConfigError) as exc:
        print(f"eaglefeed stand-in: {exc}", file=sys.stderr)
        return 2
    from eaglefeed.devtools.standin.server import serve  # aiohttp loads only when serving

    try:
        asyncio.run(serve(config, vocab=vocab))
    except OSError as exc:  # a busy or forbidden port: one line, not a traceback
        if exc.errno not in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
            raise
        print(f"eaglefeed stand-in: cannot listen on {config.host}:{config.port}: {exc.strerror}",
              file=sys.stderr)
        return 1
    return 0
