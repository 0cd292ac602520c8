"""``eaglefeed generate``: a generate worker of the consumer group."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from eaglefeed.cli._common import (
    add_command,
    add_connection_args,
    add_metrics_arg,
    add_security_args,
    add_stall_arg,
    add_trust_remote_code,
    dataset_location,
    kafka_config,
)
from eaglefeed.cli._parser import use_env
from eaglefeed.core.capture import (
    CAPTURE_DTYPES,
    DEFAULT_WAIT_SECONDS,
    CaptureSettings,
    parse_bytes,
    parse_layers,
)
from eaglefeed.core.config import (
    DEFAULT_SGLANG_URL,
    ENGINE_CHOICES,
    ON_CAPPED,
    SAMPLES_MODES,
    WorkerConfig,
    read_secret,
)
from eaglefeed.core.errors import ConfigError
from eaglefeed.core.urls import check_server_url
from eaglefeed.schemas import current_version

_W = WorkerConfig  # its field defaults are the flags' defaults
SHARED_WITH_CAPTURE = frozenset({"--sglang-url", "--concurrency", "--hidden-states-dtype",
                                 "--hidden-states-wait", "--request-timeout", "--max-attempts"})
"""Flags ``eaglefeed capture`` has too, whose generic ``EAGLEFEED_<FLAG>`` only generate read before it."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the command to ``sub``."""
    p = add_command(sub, "generate",
                    "generate workers: send prompt ids to SGLang or vLLM, publish exact output ids")
    everyday = p.add_argument_group("everyday", "the servers, the worker's group, hidden states, the broker")
    tuning = p.add_argument_group("tuning", "requests, retries, routing, checks, progress and metrics")
    expert = p.add_argument_group("expert", "delivery, rebalancing, schema upgrades: defaults suit most runs")
    everyday.add_argument("--sglang-url", action="append", dest="sglang_urls", default=[DEFAULT_SGLANG_URL],
                          type=_server_url, metavar="URL",
                          help="SGLang or vLLM server (or SGLang model gateway) base URL, http:// or "
                               "https://; repeat for several. Each must answer within --connect-timeout at "
                               "start")
    everyday.add_argument("--engine", choices=ENGINE_CHOICES, default=_W.engine,
                          help="the servers' engine; 'auto' reads each server's info routes (a pool may mix "
                               "engines). vLLM needs --enable-scale-out for its token route, else "
                               "/v1/completions is used")
    everyday.add_argument("--api-key", default=None,
                          help="sent as 'Authorization: Bearer'; '@FILE' reads it from a file")
    everyday.add_argument("--concurrency", type=_concurrency, default="auto", metavar="{auto,N}",
                          help="sequences in flight: 'auto' finds and follows each server's own limit from "
                               "the running and waiting requests it reports (/metrics) and its latency; N: "
                               "at most N per worker over all servers (size it to the servers' "
                               "--max-running-requests). Twice as many are fetched ahead")
    use_env(everyday.add_argument("--group-id", default=_W.group_id,
                                  help="consumer group of the workers (default: <topic prefix>-generate)"),
                   "GENERATE_GROUP")
    everyday.add_argument("--hidden-states", default=None, metavar="{auto,auto+last,IDS}",
                          help="also capture the target's hidden states of prompt + output[:-1] in the same "
                               "pass (vLLM with eaglefeed's connector, docs/DEPLOY.md): the layers as vLLM "
                               "ids such as 2,16,29,32, or 'auto' for [2, N//2, N-3] of the server's N "
                               "layers ('auto+last' adds N); checked against what the server captures at "
                               "start-up")
    everyday.add_argument("--hidden-states-dir", type=dataset_location, default=None, metavar="DIR",
                          help="with --hidden-states: the dataset's hidden_states/ folder (the sink's "
                               "--output + /hidden_states), where the server writes (its "
                               "shared_storage_path) and the worker checks each file; or "
                               "s3://bucket/prefix/hidden_states: the worker uploads each checked file "
                               "there from --hidden-states-spool, or checks the objects a connector with "
                               "its own store option puts there")
    everyday.add_argument("--hidden-states-dtype", choices=CAPTURE_DTYPES, default=None,
                          help="with --hidden-states: the stored dtype the server must write (default: the "
                               "server's, bfloat16 unless set in its connector config; float8_e4m3fn: "
                               "about half of bf16's bytes, a scale per position and layer)")
    everyday.add_argument("--hidden-states-wait", type=float, default=DEFAULT_WAIT_SECONDS, metavar="SECONDS",
                          help="with --hidden-states: how long a file may take to appear after its response")
    everyday.add_argument("--hidden-states-budget", default=None, metavar="BYTES",
                          help="with --hidden-states: bound the states stored and not yet consumed by every "
                               "streaming trainer group (eaglefeed.stream, docs/TRAINING.md), e.g. 200G: "
                               "once reached, the worker fetches no prompts (none is dropped) until "
                               "trainers consume or files are deleted")
    everyday.add_argument("--exit-when-idle", type=float, default=_W.exit_when_idle, metavar="SECONDS",
                          help="exit once caught up (every assigned partition read to its end, nothing in "
                               "flight) for this long (for scripted runs); a prompts topic that does not "
                               "appear within this long is an error")
    add_connection_args(everyday)
    tuning.add_argument("--samples-mode", choices=SAMPLES_MODES, default=_W.samples_mode,
                        help="several samples: one request each (seed + i), or one request with n")
    tuning.add_argument("--on-capped", choices=ON_CAPPED, default=_W.on_capped,
                        help="a sample the engine cut below max_new_tokens (its context, KV cache or a "
                             "server-wide limit): keep the row, which records the cap in capped_at "
                             "(default), or dead-letter it naming the cap")
    tuning.add_argument("--vocab-size", default="auto", metavar="{N,auto,off}",
                        help="output ids must be below N; 'auto' loads the tokenizer each prompt names "
                             "(tokenizer_id) once and checks that the servers tokenize as it does; 'off' "
                             "skips the check. N and 'off' load no tokenizer, so a server of another model "
                             "is not noticed")
    add_trust_remote_code(tuning, loads="for --vocab-size auto")
    tuning.add_argument("--tokenizer-spot-check", type=int, default=_W.tokenizer_spot_check, metavar="N",
                        help="during the run, send 1 prompt in N (its text) to every server's /tokenize and "
                             "count disagreements with the prompts' tokenizer "
                             "(eaglefeed_worker_tokenizer_spot_checks_total); 0: off")
    tuning.add_argument("--request-timeout", type=float, default=_W.request_timeout,
                        help="seconds per /generate request")
    tuning.add_argument("--max-attempts", type=int, default=_W.max_attempts,
                        help="attempts per request before dead-lettering")
    tuning.add_argument("--retry-backoff", type=float, default=_W.retry_backoff,
                        help="base seconds of the exponential backoff between attempts (full jitter)")
    tuning.add_argument("--retry-backoff-max", type=float, default=_W.retry_backoff_max,
                        help="longest wait between attempts")
    tuning.add_argument("--eject-after", type=int, default=_W.eject_after,
                        help="consecutive failures that take a server out of rotation until /health is 200")
    tuning.add_argument("--affinity-load", type=float, default=_W.affinity_load, metavar="FACTOR",
                        help="send every turn of a regenerated conversation to one server (its prefix cache "
                             "holds the earlier turns) unless that server has more than FACTOR x the mean "
                             "outstanding requests; 0: least-outstanding for every request (docs/DEPLOY.md)")
    tuning.add_argument("--probe-interval", type=float, default=_W.probe_interval,
                        help="seconds between health probes of a server out of rotation")
    tuning.add_argument("--commit-interval", type=float, default=_W.commit_interval,
                        help="seconds between offset commits (or transactions)")
    tuning.add_argument("--drain-seconds", type=float, default=_W.drain_seconds,
                        help="on SIGTERM/SIGINT, wait this long for in-flight requests before committing "
                             "and exiting (a second signal exits at once)")
    tuning.add_argument("--progress-seconds", type=float, default=_W.progress_seconds, metavar="SECONDS",
                        help="log a progress line this often: prompts done, rate, this worker's lag and ETA "
                             "(0: none)")
    tuning.add_argument("--worker-id", default=None,
                        help="stamped on records and part of the transactional id (default host-pid)")
    add_metrics_arg(tuning)
    tuning.add_argument("--hidden-states-spool", type=Path, default=None, metavar="DIR",
                        help="with an s3:// --hidden-states-dir: the local folder the server writes into "
                             "(its shared_storage_path; default: one in the cache dir, enough for SGLang, "
                             "whose states the worker writes itself)")
    expert.add_argument("--generation-schema-version", type=int, default=None,
                        choices=range(1, current_version("generation") + 1), metavar="N",
                        help="write GenerationRecord version N (default: the newest); during a rolling "
                             "upgrade, the version every running sink can read (docs/SCHEMAS.md)")
    expert.add_argument("--exactly-once", action="store_true", default=_W.exactly_once,
                        help="publish generations and commit input offsets in Kafka transactions")
    expert.add_argument("--transaction-deadline", type=float, default=_W.transaction_deadline,
                        metavar="SECONDS",
                        help="with --exactly-once: a transaction not finished in this time is given up: a "
                             "new producer takes over the transactional id (the broker settles the old "
                             "transaction) and its prompts are sent again only if it did not commit")
    expert.add_argument("--session-timeout", type=float, default=_W.session_timeout,
                        help="seconds before the group gives a silent worker's partitions to others "
                             "(default: eaglefeed's consumer default)")
    expert.add_argument("--settle-seconds", type=float, default=_W.settle_seconds, metavar="SECONDS",
                        help="fetch a newly assigned partition only once the worker's assignment has stayed "
                             "unchanged this long, so workers started together cancel no requests when the "
                             "group rebalances (0: fetch at once)")
    add_stall_arg(expert)
    add_security_args(p)
    for action in p._actions:  # flags ``capture`` shares: generate still reads their generic names
        flag = next(iter(action.option_strings), "")
        if flag in SHARED_WITH_CAPTURE:
            use_env(action, flag.lstrip("-").upper().replace("-", "_"))
    p.set_defaults(run=_run_generate)


def _capture(args: argparse.Namespace) -> CaptureSettings | None:
    """The capture settings of ``--hidden-states`` and its companions (None without it)."""
    if args.hidden_states is None:
        if (args.hidden_states_dir is not None or args.hidden_states_dtype is not None
                or args.hidden_states_budget is not None):
            raise ConfigError("--hidden-states-dir, --hidden-states-dtype and --hidden-states-budget need "
                              "--hidden-states")
        return None
    if args.hidden_states_dir is None:
        raise ConfigError("--hidden-states needs --hidden-states-dir DIR: the dataset's hidden_states/ "
                          "folder, which the server writes into")
    layers, with_last = parse_layers(args.hidden_states)
    store, upload = args.hidden_states_dir, None
    if not isinstance(store, Path):  # the dataset lives in an object store: spool, check, upload
        upload, _, folder = store.rstrip("/").rpartition("/")
        if folder != "hidden_states" or upload == "s3:/":
            raise ConfigError(f"--hidden-states-dir {store}: name the dataset's hidden_states/ folder, "
                              "s3://bucket/prefix/hidden_states (the sink's --output + /hidden_states)")
        store = args.hidden_states_spool or _spool(upload)
    elif args.hidden_states_spool is not None:
        raise ConfigError("--hidden-states-spool goes with an s3:// --hidden-states-dir")
    return CaptureSettings(store=store, layers=layers, with_last=with_last, upload=upload,
                           dtype=args.hidden_states_dtype, wait_seconds=args.hidden_states_wait,
                           budget_bytes=None if args.hidden_states_budget is None
                           else parse_bytes(args.hidden_states_budget))


def _spool(dataset: str) -> Path:
    """The default spool of the states bound for ``dataset``: a folder of the cache dir of its own."""
    import hashlib

    from eaglefeed.core.config import cache_dir

    return cache_dir() / "spool" / hashlib.sha256(dataset.encode()).hexdigest()[:16]


def _server_url(text: str) -> str:
    """An argparse type: an http:// or https:// URL with a host (a typo is an error at once)."""
    try:
        return check_server_url(text.strip())
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _concurrency(text: str) -> int | None:
    """An argparse type: ``auto`` (None: each server's limit is found at run time) or a count from 1."""
    value = str(text).strip().lower()
    if value == "auto":
        return None
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected 'auto' or a number from 1, not {text!r}")
    return int(value)


def worker_config(args: argparse.Namespace) -> WorkerConfig:
    """The WorkerConfig that parsed ``generate`` flags describe."""
    vocab = str(args.vocab_size).strip().lower()
    if vocab not in ("auto", "off") and not vocab.isdigit():
        raise SystemExit(f"eaglefeed generate: --vocab-size must be a number, 'auto' or 'off', not {vocab!r}")
    extra: dict[str, Any] = {"worker_id": args.worker_id} if args.worker_id else {}
    extra["capture"] = _capture(args)
    return WorkerConfig(
        kafka=kafka_config(args, "worker"),
        sglang_urls=tuple(u.strip() for u in args.sglang_urls if u.strip()),
        group_id=args.group_id, api_key=read_secret(args.api_key), concurrency=args.concurrency,
        request_timeout=args.request_timeout, max_attempts=args.max_attempts,
        exit_when_idle=args.exit_when_idle, stall_seconds=args.stall_seconds or None,
        metrics_port=args.metrics_port,
        samples_mode=args.samples_mode, vocab_size=int(vocab) if vocab.isdigit() else None,
        check_vocab=vocab != "off", trust_remote_code=args.trust_remote_code,
        exactly_once=args.exactly_once, transaction_deadline=args.transaction_deadline,
        drain_seconds=args.drain_seconds,
        retry_backoff=args.retry_backoff, retry_backoff_max=args.retry_backoff_max,
        eject_after=args.eject_after, probe_interval=args.probe_interval,
        commit_interval=args.commit_interval, session_timeout=args.session_timeout,
        settle_seconds=args.settle_seconds,
        generation_schema_version=args.generation_schema_version, engine=args.engine,
        progress_seconds=args.progress_seconds, on_capped=args.on_capped,
        tokenizer_spot_check=args.tokenizer_spot_check,
        affinity_load=args.affinity_load, **extra)


def _run_generate(args: argparse.Namespace) -> int:
    import logging

    from eaglefeed.consumers.generate import run_worker
    from eaglefeed.core.lifecycle import StopSignal

    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))  # a line per request
    finished = run_worker(worker_config(args), stop=StopSignal().install())
    print(f"generate: finished {finished} prompts", flush=True)
    return 0
