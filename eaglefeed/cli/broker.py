"""``eaglefeed broker start|stop|status``: the local Kafka broker, or a local cluster (``--nodes``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from eaglefeed.cli._common import add_command
from eaglefeed.cli._parser import use_env
from eaglefeed.core.config import DEFAULT_BROKER_DIR, DEFAULT_BROKER_PORT, DEFAULT_CACHE_DIR


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the command to ``sub``."""
    p = add_command(sub, "broker",
                    "run a local Apache Kafka 4.x broker, or a cluster (--nodes), KRaft, from Maven jars")
    p.add_argument("action", choices=["start", "stop", "status"])
    use_env(p.add_argument("--data-dir", type=Path, default=Path(DEFAULT_BROKER_DIR),
                           help="storage, settings, pid and logs of the broker"),
            "BROKER_DIR")
    p.add_argument("--port", type=int, default=DEFAULT_BROKER_PORT,
                   help="client port on 127.0.0.1; the controller uses PORT+1")
    p.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE_DIR,
                   help="where the Kafka jars are cached")
    p.add_argument("--nodes", type=int, default=1,
                   help="start: nodes of the cluster (each a broker and a controller voter; node i on "
                        "PORT+2(i-1)); with 3, topics get replication factor 3 and min.insync.replicas 2")
    p.set_defaults(run=_run_broker)


def _run_broker(args: argparse.Namespace) -> int:
    from eaglefeed.devtools import localbroker
    from eaglefeed.devtools.localbroker import cluster

    if args.nodes > 1 or cluster.is_cluster(args.data_dir):
        return _run_cluster(args)
    if args.action == "start":
        current = localbroker.status(args.data_dir)
        if current.running:  # one broker per data dir: say where it is rather than claim the new port
            same = (current.bootstrap_servers or "").endswith(f":{args.port}")
            print(f"a broker already runs (pid {current.pid}) at {current.bootstrap_servers}, from "
                  f"{args.data_dir}; " + ("nothing to do" if same else
                                          f"to run one on port {args.port}, stop it first "
                                          "(eaglefeed broker stop) or pass another --data-dir"))
            return 0 if same else 1
        st = localbroker.start(data_dir=args.data_dir, port=args.port, cache_dir=args.cache_dir)
        print(f"broker running (pid {st.pid}) at {st.bootstrap_servers}; logs in {st.data_dir}/logs")
        return 0
    if args.action == "stop":
        if localbroker.stop(args.data_dir):
            print("broker stopped")
            return 0
        elsewhere = _listener_elsewhere(args)
        print(elsewhere or f"no broker running: {_looked(args)}")
        return 1 if elsewhere else 0
    st = localbroker.status(args.data_dir)
    if st.running:
        print(f"running (pid {st.pid}) at {st.bootstrap_servers}")
        return 0
    print(_listener_elsewhere(args) or f"not running: {_looked(args)}")
    return 3


def _looked(args: argparse.Namespace) -> str:
    """Where status and stop looked (the data dir's pid file, the port), and how to look elsewhere."""
    from eaglefeed.devtools import localbroker

    return (f"{localbroker.status(args.data_dir).looked()}, and nothing listens on 127.0.0.1:{args.port} "
            "(--data-dir and --port say where to look)")


def _listener_elsewhere(args: argparse.Namespace) -> str | None:
    """What to say when no broker runs from ``--data-dir`` but something listens on ``--port``.

    The default data dir is relative: from another directory, status and stop would otherwise
    report "not running" about a broker that is serving on the same port.
    """
    import socket

    try:
        with socket.create_connection(("127.0.0.1", args.port), timeout=1.0):
            pass
    except OSError:
        return None
    return (f"no broker runs from {args.data_dir.resolve()}, but something listens on 127.0.0.1:{args.port}: "
            f"a broker started from another directory? Run this from there, or pass its --data-dir")


def _run_cluster(args: argparse.Namespace) -> int:
    """start/stop/status of every node of a local cluster."""
    from eaglefeed.devtools.localbroker import cluster

    if args.action == "start":
        st = cluster.start_cluster(data_dir=args.data_dir, port=args.port, cache_dir=args.cache_dir,
                                   nodes=max(args.nodes, 1))
    elif args.action == "stop":
        print(f"stopped {cluster.stop_cluster(args.data_dir)} nodes")
        return 0
    else:
        st = cluster.cluster_status(args.data_dir)
    for node_id, node in st.nodes.items():
        state = f"running (pid {node.pid})" if node.running else "not running"
        print(f"node {node_id}: {state} at {node.bootstrap_servers}; logs in {node.data_dir}/logs")
    print(f"bootstrap servers: {st.bootstrap_servers}")
    return 0 if st.running else 3
