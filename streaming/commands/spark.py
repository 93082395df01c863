"""`router spark cluster`: a Spark standalone master and workers on this machine, until stopped."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from streaming.devtools.embedded_kafka import HOST
from streaming.jars import project_root

STATE_SUBDIR = Path(".state") / "spark"
DEFAULT_PORT = 7077
"""Spark's own default master port, and docker-compose.yml's."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `spark` command and its `cluster` action."""
    parser = subparsers.add_parser(
        "spark",
        help="run a Spark standalone cluster (a master and workers) on this machine until stopped",
        description=(
            "Run a Spark standalone master and its workers from the pyspark package's own spark-class, "
            f"every one listening on {HOST} only, until Ctrl-C or SIGTERM. Point the router at it with "
            f"spark_master (or ROUTER_SPARK_MASTER) spark://{HOST}:PORT and SPARK_LOCAL_IP={HOST}. "
            "Logs and work dirs are kept in the state dir."
        ),
    )
    parser.add_argument("action", choices=("cluster",), help="cluster: start it and run until stopped")
    parser.add_argument("--workers", type=int, default=2, metavar="N", help="workers to start (default 2)")
    parser.add_argument("--cores", type=int, default=1, metavar="N", help="cores of each worker (default 1)")
    parser.add_argument("--memory", default="1g", help="memory of each worker for executors (default 1g)")
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        metavar="N",
        help=f"the master's port on {HOST} (default {DEFAULT_PORT}; 0 picks a free one)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"where the logs and work dirs live (default: {STATE_SUBDIR}/ under the project root)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Start the cluster, print its master URL on stdout, and stop it at the first SIGINT or SIGTERM."""
    from streaming.devtools.spark_cluster import StandaloneCluster

    def say(text: str) -> None:
        print(f"router spark: {text}", file=sys.stderr, flush=True)

    stop = threading.Event()

    def handle(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)
    folder = args.state_dir if args.state_dir is not None else project_root() / STATE_SUBDIR
    cluster = StandaloneCluster(
        folder, args.workers, port=args.port or None, cores=args.cores, memory=args.memory
    )
    with cluster:
        say(
            f"a master and {args.workers} worker(s) of {args.cores} core(s) and {args.memory} each; "
            f"web UI http://{HOST}:{cluster.ui_port}; logs in {cluster.folder}; Ctrl-C stops them"
        )
        print(cluster.url, flush=True)
        stop.wait()
        say("stopping the workers and the master")
    say("stopped")
    return 0
