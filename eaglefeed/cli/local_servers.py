"""Local servers to run the pipeline against: ``stub-sglang`` and ``store``.

``stub-sglang`` is the SGLang stand-in (a test and demo double); ``store`` is a real S3-compatible
object store (s3proxy from Maven jars) to hold ``s3://`` datasets.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from eaglefeed.cli._common import add_command
from eaglefeed.cli._parser import use_env
from eaglefeed.core.config import DEFAULT_CACHE_DIR


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the commands to ``sub``."""
    from eaglefeed.devtools import standin

    p = add_command(sub, "stub-sglang", "run the SGLang stand-in (a test and demo double of SGLang's "
                                     "native HTTP API; no GPU, no model)")
    standin.add_arguments(p)
    p.set_defaults(run=standin.run)
    _register_store(sub)


DEFAULT_STORE_DIR = ".eaglefeed/store"
DEFAULT_STORE_PORT = 9000


def _register_store(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = add_command(sub, "store", "run a local S3-compatible object store (s3proxy 2.6.0 from Maven jars, "
                                  "filesystem-backed) to hold datasets at s3://bucket/prefix")
    p.add_argument("action", choices=["start", "stop", "status"])
    use_env(p.add_argument("--data-dir", type=Path, default=Path(DEFAULT_STORE_DIR),
                           help="objects, settings, pid and log of the store"),
            "STORE_DIR")
    p.add_argument("--port", type=int, default=DEFAULT_STORE_PORT, help="HTTP port on 127.0.0.1")
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR,
                   help="where the s3proxy jars are cached")
    p.set_defaults(run=_run_store)


def _run_store(args: argparse.Namespace) -> int:
    from eaglefeed.devtools import localstore

    if args.action == "start":
        st = localstore.start(data_dir=args.data_dir, port=args.port, cache_dir=args.cache_dir)
        print(f"object store running (pid {st.pid}) at {st.endpoint}; objects in {st.data_dir}/objects. "
              "Point eaglefeed at it with:")
        print("\n".join(f"  export {name}={value}" for name, value in st.environment().items()))
        return 0
    if args.action == "stop":
        stopped = localstore.stop(args.data_dir)
        where = args.data_dir.resolve()
        print("object store stopped" if stopped else f"no object store running from {where}")
        return 0
    st = localstore.status(args.data_dir)
    if st.running:
        print(f"running (pid {st.pid}) at {st.endpoint}")
        return 0
    print(f"not running: no live {localstore.PID_FILE} in {args.data_dir.resolve()} "
          "(--data-dir says where to look)")
    return 3
