"""``eaglefeed compact``, ``gc`` and ``capture``: a dataset's upkeep, all safe while the sink runs.

``compact`` merges small segments into training shards; ``gc`` deletes the hidden-state files no
row names; ``capture`` adds hidden states to the rows written without them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from eaglefeed.cli._common import add_command, add_dataset_arg, dataset_dir
from eaglefeed.core.config import DEFAULT_COMPACT_TARGET_BYTES, DEFAULT_STORE_GRACE_SECONDS


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the commands to ``sub``."""
    _register_compact(sub)
    _register_gc(sub)
    _register_capture(sub)


def _register_compact(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = add_command(sub, "compact", "merge small segments into training shards of a target size, "
                                    "optionally dropping rows; safe while the sink is writing")
    add_dataset_arg(p)
    p.add_argument("--target-bytes", type=int, default=DEFAULT_COMPACT_TARGET_BYTES,
                   help="shard size to aim for")
    p.add_argument("--drop-finish-reasons", default="", metavar="REASON[,REASON]",
                   help="drop rows with these finish reasons, e.g. length,abort")
    p.add_argument("--min-loss-tokens", type=int, default=0,
                   help="drop rows with fewer generated (loss_mask=1) tokens")
    p.add_argument("--include-partial", action="store_true",
                   help="also merge the last group when it is below the target (e.g. after the sink stopped)")
    p.add_argument("--store-grace-seconds", type=float, default=DEFAULT_STORE_GRACE_SECONDS,
                   metavar="SECONDS",
                   help="in a dataset whose home is s3://, keep the store's copy of a file compacted away "
                        "this long: readers on other hosts may still be reading it (a later run deletes it)")
    p.set_defaults(run=_run_compact)


def _run_compact(args: argparse.Namespace) -> int:
    args.dataset = dataset_dir(args.dataset)
    from eaglefeed.dataset import CompactOptions, compact, live_segments, read_manifest

    reasons = frozenset(r.strip() for r in args.drop_finish_reasons.split(",") if r.strip())
    summary = compact(args.dataset, CompactOptions(
        target_bytes=args.target_bytes, drop_finish_reasons=reasons, min_loss_tokens=args.min_loss_tokens,
        include_partial=args.include_partial, store_grace_seconds=args.store_grace_seconds))
    dropped = ", ".join(f"{k} {v}" for k, v in sorted(summary.dropped.items())) or "none"
    print(f"compact: {summary.inputs} files ({summary.rows_in} rows, {summary.bytes_in / 1e6:.1f} MB) → "
          f"{summary.shards} shards ({summary.rows_out} rows, {summary.bytes_out / 1e6:.1f} MB); "
          f"dropped: {dropped}; deleted {summary.deleted} old files")
    left = len(live_segments(read_manifest(args.dataset)))
    if not summary.shards and not args.include_partial and left > 1:
        print(f"compact: the segments add up to less than --target-bytes {args.target_bytes}; "
              "add --include-partial to merge them anyway (e.g. once the sink has stopped)")
    return 0


def _register_gc(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from eaglefeed.dataset.collect import DEFAULT_GRACE_SECONDS

    p = add_command(sub, "gc", "delete hidden-state files that no row names (failed checks, retries, "
                               "duplicates, dropped rows); never one a row names; safe while the sink runs")
    add_dataset_arg(p)
    p.add_argument("--grace-seconds", type=float, default=DEFAULT_GRACE_SECONDS, metavar="SECONDS",
                   help="keep unnamed files younger than this: records still in Kafka name files that no "
                        "row names yet (the sink stops on a missing one)")
    p.add_argument("--dry-run", action="store_true", help="count what would be deleted, delete nothing")
    p.set_defaults(run=_run_gc)


def _run_gc(args: argparse.Namespace) -> int:
    args.dataset = dataset_dir(args.dataset)
    from eaglefeed.dataset.collect import collect

    summary = collect(args.dataset, grace_seconds=args.grace_seconds, dry_run=args.dry_run)
    verb = "would delete" if args.dry_run else "deleted"
    print(f"gc: {summary.referenced} files named by rows kept; {verb} {summary.deleted} unnamed files "
          f"({summary.deleted_bytes / 1e6:.1f} MB); kept {summary.young} unnamed files younger than "
          f"{args.grace_seconds:.0f} s")
    if summary.missing:
        print(f"gc: {summary.missing} files that rows name are missing from {args.dataset}/hidden_states")
        return 1
    return 0


def _register_capture(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from eaglefeed.cli._common import positive_int
    from eaglefeed.cli.generate import _server_url
    from eaglefeed.core.capture import CAPTURE_DTYPES, DEFAULT_WAIT_SECONDS

    p = add_command(sub, "capture", "add hidden states to the rows of a dataset made without them (before "
                                    "capture, or by SGLang): one prefill-only request per row to a "
                                    "capture-enabled vLLM, then the rows reference their files; resumable, "
                                    "each row once; safe while the sink runs")
    add_dataset_arg(p)
    p.add_argument("--sglang-url", action="append", dest="sglang_urls", default=None, type=_server_url,
                   metavar="URL", help="a capture-enabled vLLM (--enable-scale-out, eaglefeed's connector "
                                       "with shared_storage_path DATASET/hidden_states); repeat for several; "
                                       "required")
    p.add_argument("--api-key", default=None,
                   help="sent as 'Authorization: Bearer'; '@FILE' reads it from a file")
    p.add_argument("--concurrency", type=positive_int, default=16, metavar="N",
                   help="requests in flight over all servers")
    p.add_argument("--hidden-states", default="auto", metavar="{auto,auto+last,IDS}",
                   help="the layers as vLLM ids such as 2,16,29,32, or 'auto' for [2, N//2, N-3] of the "
                        "server's N layers ('auto+last' adds N); rows that already have states hold the run "
                        "to theirs; checked against what the server captures at start-up")
    p.add_argument("--hidden-states-dtype", choices=CAPTURE_DTYPES, default=None,
                   help="the stored dtype the server must write (default: the server's, or the one rows "
                        "that already have states hold)")
    p.add_argument("--hidden-states-wait", type=float, default=DEFAULT_WAIT_SECONDS, metavar="SECONDS",
                   help="how long a file may take to appear after its response")
    p.add_argument("--request-timeout", type=float, default=600.0, help="seconds per request")
    p.add_argument("--max-attempts", type=positive_int, default=5,
                   help="attempts per row before it is left without states (a later run retries it)")
    p.add_argument("--connect-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="how long a server may take to answer at start")
    p.add_argument("--progress-seconds", type=float, default=10.0, metavar="SECONDS",
                   help="print a progress line this often: rows done of all, rate, ETA (0: none)")
    p.set_defaults(run=_run_capture)


def _run_capture(args: argparse.Namespace) -> int:
    if not isinstance(args.dataset, Path):  # the capture servers write a directory they share with us
        from eaglefeed.core.errors import ConfigError

        raise ConfigError(f"capture: {args.dataset}: the post-pass writes hidden states into a directory the "
                          "capture servers share; run it on a local dataset")
    args.dataset = dataset_dir(args.dataset)
    from eaglefeed.core.capture import CaptureSettings, parse_layers
    from eaglefeed.core.config import read_secret
    from eaglefeed.core.errors import ConfigError
    from eaglefeed.core.lifecycle import StopSignal
    from eaglefeed.dataset.hidden_states import STORE
    from eaglefeed.ops.capture_states import CaptureOptions, run_capture

    if not args.sglang_urls:
        raise ConfigError("capture needs --sglang-url URL: a capture-enabled vLLM (docs/DATASET.md, "
                          "\"Hidden states\")")
    layers, with_last = parse_layers(args.hidden_states)
    settings = CaptureSettings(store=args.dataset / STORE, layers=layers, with_last=with_last,
                               dtype=args.hidden_states_dtype, wait_seconds=args.hidden_states_wait)
    options = CaptureOptions(root=args.dataset, urls=tuple(args.sglang_urls), capture=settings,
                             concurrency=args.concurrency, api_key=read_secret(args.api_key),
                             request_timeout=args.request_timeout, max_attempts=args.max_attempts,
                             connect_timeout=args.connect_timeout, progress_seconds=args.progress_seconds)
    summary = run_capture(options, stop=StopSignal().install(), report=lambda line: print(line, flush=True))
    print(summary.line(), flush=True)
    if summary.stopped:
        return 130
    return 1 if summary.failed else 0
