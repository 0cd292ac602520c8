"""``eaglefeed broker start|stop|status``: the local single-node Kafka broker."""

from __future__ import annotations

import argparse
from pathlib import Path

from eaglefeed.commands._common import add_command, cache_dir, int_env
from eaglefeed.config import DEFAULT_BROKER_DIR, DEFAULT_BROKER_PORT, env_default


def register(sub: argparse._SubParsersAction) -> None:
    """Add the command to ``sub``."""
    p = add_command(sub, "broker", "run a local single-node Apache Kafka 4.x broker (KRaft) from Maven jars")
    p.add_argument("action", choices=["start", "stop", "status"])
    p.add_argument("--data-dir", type=Path,
                   default=Path(env_default("BROKER_DIR", DEFAULT_BROKER_DIR) or "."),
                   help="storage, settings, pid and logs of the broker (env EAGLEFEED_BROKER_DIR)")
    p.add_argument("--port", type=int, default=int_env("BROKER_PORT", DEFAULT_BROKER_PORT),
                   help="client port on 127.0.0.1; the controller uses PORT+1 (env EAGLEFEED_BROKER_PORT)")
    p.add_argument("--cache-dir", type=Path, default=cache_dir(),
                   help="where the Kafka jars are cached (env EAGLEFEED_CACHE_DIR)")
    p.set_defaults(run=_run_broker)


def _run_broker(args: argparse.Namespace) -> int:
    from eaglefeed import localbroker

    if args.action == "start":
        st = localbroker.start(data_dir=args.data_dir, port=args.port, cache_dir=args.cache_dir)
        print(f"broker running (pid {st.pid}) at {st.bootstrap_servers}; logs in {st.data_dir}/logs")
        return 0
    if args.action == "stop":
        print("broker stopped" if localbroker.stop(args.data_dir) else "no broker running")
        return 0
    st = localbroker.status(args.data_dir)
    print(f"running (pid {st.pid}) at {st.bootstrap_servers}" if st.running else "not running")
    return 0 if st.running else 3
