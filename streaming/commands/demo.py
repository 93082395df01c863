"""`router demo`: the embedded broker, two instances' routes and catalogs, traffic, and the router.

It starts the embedded Kafka broker (unless one runs), loads `routes/demo/` into a fresh topic
namespace, sends conversations from i1's AdventureWorks database (to OrderParts on i2 through the
forwarder f1, to the local AuditService, and to a service nobody hosts), routes i1, then f1, then i2
with `router replay`'s job, and prints how many messages ended in each destination, with which
outcome.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from streaming import topics
from streaming.commands.kafka import default_state_dir
from streaming.commands.tail import headers_of
from streaming.config import load_settings
from streaming.devtools.demo_data import load_demo
from streaming.devtools.embedded_kafka import DEFAULT_PORT, EmbeddedKafka
from streaming.errors import RouterError
from streaming.jars import project_root
from streaming.kafka.admin import end_offsets, topic_names
from streaming.kafka.client_log import librdkafka_log
from streaming.kafka.connection import ClientValue, client_config
from streaming.text import format_table


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `demo` command."""
    parser = subparsers.add_parser(
        "demo",
        help="start the embedded broker, load sample routes, send traffic, route it, print a summary",
        description=__doc__,
    )
    parser.add_argument("--conversations", type=int, default=300, help="conversations to start (default 300)")
    parser.add_argument("--messages", type=int, default=2, help="messages per conversation (default 2)")
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"broker port (default {DEFAULT_PORT})"
    )
    parser.add_argument("--routes-dir", type=Path, default=None, help="sample data (default routes/demo)")
    parser.add_argument(
        "--state-dir", type=Path, default=None, help="the broker's state folder (default .state/kafka)"
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="also show Spark's and Kafka's warnings (on stderr)"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the demo end to end and print the summary table."""
    from streaming.spark.job import RouterJob
    from streaming.spark.progress import ProgressLines
    from streaming.spark.session import build_session

    started = time.monotonic()
    state_dir = args.state_dir or default_state_dir()
    broker = EmbeddedKafka(state_dir, port=args.port)
    result = broker.start()
    bootstrap = result.bootstrap
    print(
        f"demo: Kafka broker at {bootstrap} ({'already running' if result.already_running else 'started'})",
        flush=True,
    )

    data = args.routes_dir or project_root() / "routes" / "demo"
    prefix = f"demo{datetime.now(timezone.utc):%Y%m%d%H%M%S}"
    loaded, sent = load_demo(bootstrap, prefix, data, args.conversations, args.messages)
    print(
        f"demo: loaded {loaded} catalogs and the routes of {data} under topic prefix {prefix!r}", flush=True
    )
    print(f"demo: sent {sent} messages in {args.conversations} conversations from i1/AW", flush=True)

    spark = build_session("router-demo", verbose=args.verbose)
    state = Path(state_dir).parent / "checkpoints" / prefix
    for instance in ("i1", "f1", "i2"):  # each hop: i1 sends to f1, f1 forwards to i2, i2 delivers
        settings = load_settings(
            None,
            instance=instance,
            bootstrap=bootstrap,
            topic_prefix=prefix,
            checkpoint_dir=str(state / instance),
        )
        job = RouterJob(spark, settings)

        def say(text: str, name: str = instance) -> None:
            print(f"demo: router {name}: {text}", flush=True)

        try:
            job.replay(on_batch=ProgressLines().to(say))
        except RouterError as exc:
            print(f"demo: {exc}")
            return 1
        finally:
            job.close()
        print(
            f"demo: router {instance}: {job.totals.summary()}",
            flush=True,
        )

    print()
    print(_summary(bootstrap, prefix))
    print()
    print(
        f"demo: done in {time.monotonic() - started:.0f}s. Look closer with `.venv/bin/router tail "
        f"{topics.delayed_topic('i1', prefix)} --from-beginning --bootstrap {bootstrap}`."
    )
    print(
        "demo: the broker keeps running; stop it with `make kafka-stop` (or `.venv/bin/router kafka stop`)."
    )
    return 0


_NOT_DESTINATIONS = (".outbound", ".routes", ".catalogs", ".mirrors", ".choices", ".requests")


def _summary(bootstrap: str, prefix: str) -> str:
    """Count the records of every destination topic under `prefix` by their outcome header."""
    destinations = sorted(
        t for t in topic_names(bootstrap) if t.startswith(f"{prefix}.") and not t.endswith(_NOT_DESTINATIONS)
    )
    counts: Counter[tuple[str, str]] = Counter()
    own: dict[str, ClientValue] = {"group.id": f"demo-{uuid.uuid4()}", "enable.auto.commit": False}
    consumer = Consumer(client_config(bootstrap, **own), logger=librdkafka_log())
    try:
        for topic in destinations:
            ends = end_offsets(bootstrap, topic)
            consumer.assign([TopicPartition(topic, p, 0) for p in ends])
            remaining = sum(ends.values())
            deadline = time.monotonic() + 30
            while remaining > 0 and time.monotonic() < deadline:
                msg = consumer.poll(1.0)
                if msg is None or msg.error():
                    continue
                remaining -= 1
                headers = headers_of(msg)
                outcome = headers.get("outcome", "(input)")
                reason = headers.get("reason")
                counts[(topic, outcome + (f" ({reason})" if reason else ""))] += 1
    finally:
        consumer.close()
    rows = [[topic[len(prefix) + 1 :], outcome, str(n)] for (topic, outcome), n in sorted(counts.items())]
    return format_table(["destination topic", "outcome", "messages"], rows)
