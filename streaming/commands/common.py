"""What the commands that talk to Kafka share: the connection, the topic prefix, output helpers."""

from __future__ import annotations

import argparse
import base64
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import Any

from streaming.config import BOOTSTRAP_ENV, CONFIG_ENV, DEFAULT_BOOTSTRAP, load_connection
from streaming.errors import ConfigError, RouterError
from streaming.instants import format_instant, parse_instant
from streaming.kafka.connection import KafkaConnection
from streaming.observe.server import DEFAULT_HOST as DEFAULT_METRICS_HOST
from streaming.tables.reader import TableRead
from streaming.topics import DEFAULT_PREFIX, MAX_PREFIX, check_prefix


def add_kafka_arguments(parser: argparse.ArgumentParser) -> None:
    """Add `--bootstrap` and `--config`: how the command connects to Kafka (`kafka_from`)."""
    parser.add_argument(
        "--bootstrap",
        metavar="HOST:PORT",
        default=None,
        help=f"Kafka bootstrap servers (default: the settings file's, else ${BOOTSTRAP_ENV}, "
        f"else {DEFAULT_BOOTSTRAP})",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=None,
        help="the router's settings YAML (streaming/config.py); its `bootstrap` and `kafka` (security) "
        f"settings say how to connect (default: ${CONFIG_ENV})",
    )


def config_path(args: argparse.Namespace) -> str | None:
    """The settings file: `--config`, else $ROUTER_CONFIG, else none."""
    return getattr(args, "config", None) or os.environ.get(CONFIG_ENV) or None


def kafka_settings(args: argparse.Namespace) -> KafkaConnection:
    """The connection every client of the command uses (streaming/kafka/connection.py), not yet tried.

    The settings file's `bootstrap` and `kafka` section, under $ROUTER_BOOTSTRAP, under `--bootstrap`.
    """
    return load_connection(config_path(args), getattr(args, "bootstrap", None))


def kafka_from(args: argparse.Namespace) -> KafkaConnection:
    """`kafka_settings`, once the cluster has answered: a command's connection.

    A cluster that does not answer within a few seconds is a KafkaUnavailable that names the
    address and the fix (`streaming.kafka.admin.require_broker`).
    """
    from streaming.kafka.admin import require_broker

    kafka = kafka_settings(args)
    require_broker(kafka)
    return kafka


def topic_prefix_type(text: str) -> str:
    """The argparse type of `--topic-prefix`: a prefix `streaming.topics.check_prefix` accepts.

    A refused prefix is a usage error (exit 2) with check_prefix's message.
    """
    try:
        return check_prefix(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def add_table_list_arguments(parser: argparse.ArgumentParser, what: str) -> None:
    """The flags of a `list` that reads a table topic: `--json`, `--strict`, the connection, the prefix."""
    parser.add_argument("--json", action="store_true", help=f"one JSON object per {what}")
    parser.add_argument(
        "--strict", action="store_true", help="exit 2, listing them, if any record of the topic is skipped"
    )
    add_kafka_arguments(parser)
    add_prefix_argument(parser)


def add_prefix_argument(parser: argparse.ArgumentParser, default: str | None = DEFAULT_PREFIX) -> None:
    """Add `--topic-prefix`; `default=None` leaves the prefix to a settings file (`run`, `replay`)."""
    shown = (
        f"default: {default}"
        if default is not None
        else f"overrides the settings file; default: {DEFAULT_PREFIX}"
    )
    parser.add_argument(
        "--topic-prefix",
        metavar="P",
        type=topic_prefix_type,
        default=default,
        help=f"namespace of the router's topics, 1 to {MAX_PREFIX} characters of [A-Za-z0-9._-] ({shown})",
    )


def utc_now() -> datetime:
    """Return the current instant, UTC (commands read the clock here, the rules never do)."""
    return datetime.now(timezone.utc)


def parse_instant_arg(text: str, flag: str) -> datetime:
    """Return the UTC instant of an ISO-8601 command-line value (`Z` or an offset; naive = UTC)."""
    instant = parse_instant(text)
    if instant is None:
        raise ConfigError(f"{flag}: expected an instant like 2026-01-01T00:00:00Z, got {text!r}")
    return instant


def json_safe(value: object) -> object:
    """Return `value` with datetimes as instants and bytes as text (UTF-8) or `{"base64": ...}`."""
    if isinstance(value, datetime):
        return format_instant(value)
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def empty_table_hint(kafka: KafkaConnection, topic: str, prefix: str) -> str:
    """What to say when `topic` (a table topic under `prefix`) holds nothing: the other prefixes to try.

    The demo and the tests write under prefixes of their own; the cluster's topics named like this
    one under another prefix are listed, so that the user sees which `--topic-prefix` to give.
    """
    from streaming.kafka.admin import topic_names

    suffix = topic[len(prefix) :]
    others = sorted(
        name[: -len(suffix)] for name in topic_names(kafka) if name.endswith(suffix) and name != topic
    )
    where = f"{topic} holds nothing"
    if not others:
        return f"{where} (and no other prefix has one): load some first"
    shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
    return f"{where}; other prefixes hold one ({shown}): give yours with --topic-prefix"


def skipped_note(read: TableRead[Any]) -> str:
    """Return how many records the read skipped, and where they are described."""
    return f"{len(read.skipped)} record(s) skipped (see the warnings; --strict makes them an error)"


def refuse_skipped(read: TableRead[Any]) -> None:
    """Raise RouterError listing the records the read skipped, if it skipped any (`--strict`)."""
    if read.skipped:
        listed = "\n  ".join(skipped.describe(read.topic) for skipped in read.skipped)
        raise RouterError(
            f"--strict: expected every record of {read.topic} to be valid, {len(read.skipped)} skipped:\n  "
            f"{listed}\nwrite the key again with a valid value (or a tombstone) to replace each one"
        )


def add_service_command(
    subparsers: Any,
    name: str,
    *,
    help: str,
    description: str | None,
    file_help: str,
    check_help: str,
    serve_help: str,
    run_check: Callable[[argparse.Namespace], int],
    run_serve: Callable[[argparse.Namespace], int],
) -> argparse.ArgumentParser:
    """A service's command: `NAME check FILE...` and `NAME serve FILE --instance I`; the serve parser.

    The serve parser has the file, `--instance`, the connection and the prefix; add the rest to it.
    """
    parser = subparsers.add_parser(
        name, help=help, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest=f"{name}_command", metavar="ACTION", required=True)
    check = sub.add_parser("check", help=check_help)
    check.add_argument("files", metavar="FILE", type=Path, nargs="+", help=f"{file_help} (one or more)")
    check.set_defaults(func=run_check)
    serve = sub.add_parser("serve", help=serve_help)
    serve.add_argument("file", metavar="FILE", type=Path, help=file_help)
    serve.add_argument("--instance", required=True, help="the instance the service works for")
    add_kafka_arguments(serve)
    add_prefix_argument(serve)
    serve.set_defaults(func=run_serve)
    return serve


def check_each(command: str, files: list[Path], check: Callable[[Path], str]) -> int:
    """Run `check` on each file and print what it says; return 0 when all passed, else 2.

    A file that fails is named on stderr with its error, and the files after it are still checked.
    """
    failed = 0
    for file in files:
        try:
            print(check(file), flush=True)
        except RouterError as exc:
            print(f"router {command} check: error: {exc}", file=sys.stderr, flush=True)
            failed += 1
    if failed and len(files) > 1:
        print(f"router {command} check: {failed} of {len(files)} file(s) failed", file=sys.stderr)
    return 2 if failed else 0


def stop_on_signals() -> threading.Event:
    """An event that Ctrl-C (SIGINT) or SIGTERM sets, saying so on stdout: a service stops on it."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        print(f"{signal.Signals(signum).name}: stopping", flush=True)
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    return stop


def add_metrics_arguments(parser: argparse.ArgumentParser, what: str, *, from_settings: bool = False) -> None:
    """`--metrics-port` and `--metrics-host`: where a long-running command serves `/metrics` and `/healthz`.

    `what` names what is observed; `from_settings`: the defaults are the settings file's
    (`metrics_port`, `metrics_host`), as for `run` and `replay`.
    """
    settings = "the settings file's metrics_port, else " if from_settings else ""
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=None if from_settings else 0,
        metavar="PORT",
        help=f"serve {what}'s Prometheus metrics at /metrics and its health check at /healthz on this "
        f"port (default: {settings}0: no server)",
    )
    host = "the settings file's metrics_host, else " if from_settings else ""
    parser.add_argument(
        "--metrics-host",
        default=None if from_settings else DEFAULT_METRICS_HOST,
        metavar="HOST",
        help=f"the address the metrics server listens on (default: {host}{DEFAULT_METRICS_HOST}: "
        "this machine only)",
    )


def served_at(address: str) -> str:
    """The line a command prints once its metrics server listens at `address` (host:port)."""
    return f"metrics at http://{address}/metrics, health at http://{address}/healthz"
