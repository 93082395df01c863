"""`router kafka start|stop|status`: the embedded single-node Kafka broker for development."""

from __future__ import annotations

import argparse
from pathlib import Path

from streaming.devtools.embedded_kafka import DEFAULT_PORT, HOST, EmbeddedKafka
from streaming.jars import project_root

STATE_SUBDIR = Path(".state") / "kafka"


def default_state_dir() -> Path:
    """Return `<project root>/.state/kafka`, where `router kafka` keeps the broker's files."""
    return project_root() / STATE_SUBDIR


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `kafka` command and its `start`, `stop` and `status` actions."""
    parser = subparsers.add_parser(
        "kafka",
        help="start, stop or inspect the embedded single-node Kafka broker",
        description=(
            "Run a real Apache Kafka 4.1 broker (KRaft, one node, 127.0.0.1 only) from the jars that "
            "`make setup` copied into .cache/jars/kafka. It keeps running after the command returns; "
            "its log is kafka.log in the state dir."
        ),
    )
    parser.add_argument(
        "action",
        choices=("start", "stop", "status"),
        help="start: start it and print the bootstrap address (no-op when running); "
        "stop: shut it down cleanly; status: say whether it runs and where",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"where its config, data, pid and log live (default: {STATE_SUBDIR}/ under the project root)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        metavar="N",
        help=f"the client port on {HOST} for `start` (default: {DEFAULT_PORT}; 0 picks a free one)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Carry out one `router kafka` action; return the exit code (status: 0 running, 1 not)."""
    state_dir = args.state_dir if args.state_dir is not None else default_state_dir()
    broker = EmbeddedKafka(state_dir, port=args.port or None)
    if args.action == "start":
        result = broker.start()
        if result.already_running:
            print(f"Kafka is already running at {result.bootstrap} (pid {result.pid}); nothing to do")
        else:
            print(f"Kafka started at {result.bootstrap} in {result.seconds:.1f} s (pid {result.pid})")
        print(f"bootstrap: {result.bootstrap}")
        print(f"log: {broker.log_file}")
        return 0
    if args.action == "stop":
        stopped = broker.stop()
        if not stopped.was_running:
            print(f"Kafka is not running (state dir {broker.state_dir}); nothing to do")
        elif stopped.killed:
            print(f"Kafka did not stop on SIGTERM and was killed (see {broker.log_file})")
        else:
            print(f"Kafka stopped in {stopped.seconds:.1f} s")
        return 0
    status = broker.status()
    if status.running:
        print(f"Kafka is running at {status.bootstrap} (pid {status.pid}); log: {status.log_file}")
        return 0
    print(f"Kafka is not running (state dir {status.state_dir})")
    return 1
