"""`router checkpoint show DIR`: what a router's checkpoint holds.

From the checkpoint's files alone (no Kafka; `streaming.spark.checkpoint.summarize`), with no Spark
for a folder of this machine; a checkpoint on a Hadoop file system (hdfs://namenode:8020/router/i1)
is read through a local SparkSession's Hadoop client, started first:

  query         the streaming query's id, and the instances it routes (from the topics it reads)
  batches       the last committed micro-batch and when it was committed; a batch planned after
                it and not committed (the next start plans it again)
  state         the number of state partitions the checkpoint is fixed to
  input offsets per topic and partition, where the committed batches have read up to

Then, unless --no-state, the state the last committed batch left, per instance, read with Spark's
state data source (a local SparkSession; it takes seconds): conversation endpoints held, their
kept choices (K2) and their delayed messages (D1, D2). The MissingRoute requests outstanding (B4)
are not in the checkpoint but on each instance's compacted requests topic: --requests reads them
from Kafka (--bootstrap, --config).

    router checkpoint show .state/checkpoints/i1
    router checkpoint show .state/checkpoints/i1 --no-state --json
    router checkpoint show hdfs://namenode:8020/router/i1
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streaming.commands.common import add_kafka_arguments, kafka_from, utc_now
from streaming.instants import format_age
from streaming.spark.checkpoint import CheckpointSummary, summarize
from streaming.spark.checkpoint_files import is_url, locate
from streaming.text import format_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

INSTANCE_FIGURES = (
    ("endpoints", "endpoints"),
    ("kept_choices", "kept choices"),
    ("delayed", "delayed messages"),
    ("delayed_endpoints", "endpoints delayed"),
)
"""The state's figures per instance (`streaming.spark.state.state_counts`), with their headers."""


def register(subparsers: Any) -> None:
    """Add `checkpoint show`."""
    parser = subparsers.add_parser(
        "checkpoint",
        help="what a router's checkpoint holds: instances, batches, offsets, state partitions and rows",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = sub.add_parser(
        "show",
        help="what the checkpoint holds (see `router checkpoint --help`)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    show.add_argument(
        "dir",
        metavar="DIR",
        help="the router's checkpoint_dir (as in its settings: a folder, or a Hadoop file system's URL; "
        "the `query` folder in it is taken too)",
    )
    show.add_argument("--json", action="store_true", help="print one JSON line instead of the tables")
    show.add_argument(
        "--no-state",
        action="store_true",
        help="do not count the state's rows: the checkpoint's files alone, in a fraction of a second",
    )
    show.add_argument(
        "--requests",
        action="store_true",
        help="also count each instance's outstanding MissingRoute requests, read from Kafka",
    )
    add_kafka_arguments(show)
    show.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print what the checkpoint holds: a JSON line (`--json`) or tables."""
    if not is_url(args.dir):
        return show(args, summarize(Path(args.dir)))
    started = time.monotonic()
    spark = _session(2)
    spark_start_s = time.monotonic() - started
    try:
        return show(args, summarize(locate(args.dir, spark)), spark, spark_start_s)
    finally:
        spark.stop()


def show(
    args: argparse.Namespace,
    summary: CheckpointSummary,
    spark: SparkSession | None = None,
    spark_start_s: float = 0.0,
) -> int:
    """Print `summary`, with the state's figures and the requests when asked; `spark`: a session to use."""
    document = summary.document()
    if not args.no_state and summary.last_committed is not None:
        document.update(count_state(summary, spark, spark_start_s))
    if args.requests:
        document["requests"] = outstanding_requests(args, summary)
    if args.json:
        print(json.dumps(document, sort_keys=True))
    else:
        print(render(summary, document))
    return 0


def count_state(
    summary: CheckpointSummary, spark: SparkSession | None = None, spark_start_s: float = 0.0
) -> dict[str, Any]:
    """The state's figures per instance (`state`), read with Spark's state data source.

    A local SparkSession reads them (`spark`, or one started here); `spark_start_s` and
    `state_read_s` say how long it took to start and to read.
    """
    from streaming.spark.state import state_counts

    assert summary.last_committed is not None
    started = time.monotonic()
    own = spark is None
    session = _session(summary.state_partitions or 2) if spark is None else spark
    try:
        read = time.monotonic()
        counts = state_counts(session, summary.folder, summary.last_committed)
        done = time.monotonic()
    finally:
        if own:
            session.stop()
    return {
        "state": counts,
        "state_batch": summary.last_committed,
        "spark_start_s": round(read - started + spark_start_s, 2),
        "state_read_s": round(done - read, 2),
    }


def _session(partitions: int) -> SparkSession:
    from streaming.spark.session import build_session

    return build_session("router-checkpoint-show", "local[2]", partitions)


def outstanding_requests(args: argparse.Namespace, summary: CheckpointSummary) -> dict[str, int]:
    """Per instance, the MissingRoute requests its requests topic holds as outstanding (B4)."""
    from streaming.tables.reader import TableReader
    from streaming.tables.records import RequestRecords
    from streaming.topics import requests_topic

    kafka = kafka_from(args)
    counts: dict[str, int] = {}
    for instance in summary.instances:
        topic = requests_topic(instance, summary.prefix or "")
        with TableReader(kafka, topic, RequestRecords()) as reader:
            reader.read_to_end()
            counts[instance] = sum(1 for request in reader.values() if request.asked)
    return counts


def render(summary: CheckpointSummary, document: dict[str, Any]) -> str:
    """The summary as a person reads it: a few lines, then the offsets and the state as tables."""
    lines = [f"checkpoint  {summary.folder}", f"query id    {summary.query_id}"]
    if summary.last_committed is None:
        lines.append("batches     none committed yet: the query starts from the beginning of its topics")
        return "\n".join(lines)
    lines.append(f"instances   {', '.join(summary.instances)} (topic prefix {summary.prefix})")
    assert summary.committed_at is not None
    ago = (utc_now() - summary.committed_at).total_seconds()
    lines.append(
        f"last batch  {summary.last_committed}, committed {document['committed_at']} ({format_age(ago)} ago)"
    )
    if summary.uncommitted is not None:
        lines.append(
            f"uncommitted batch {summary.uncommitted}: planned, not committed; the next start plans it again"
        )
    operator = summary.state_operator or "no state operator yet"
    lines.append(f"state       {summary.state_partitions} partitions ({operator})")
    if summary.rotation_batch is not None:
        lines.append(
            f"rotation    the counters of equal routes (C5, M3) as batch {summary.rotation_batch} left them"
        )
    rows = [
        [topic, str(partition), f"{offset:,}"]
        for topic, by_partition in sorted(summary.offsets.items())
        for partition, offset in sorted(by_partition.items())
    ]
    lines += ["", "input offsets (read up to by the committed batches)"]
    lines.append(format_table(["topic", "partition", "offset"], rows))
    state = document.get("state")
    requests = document.get("requests")
    if state is not None or requests is not None:
        headers = ["instance"]
        if state is not None:
            headers += [title for _, title in INSTANCE_FIGURES]
        if requests is not None:
            headers.append("requests outstanding")
        table = []
        for instance in summary.instances:
            row = [instance]
            if state is not None:
                figures = state.get(instance, {})
                row += [f"{figures.get(name, 0):,}" for name, _ in INSTANCE_FIGURES]
            if requests is not None:
                row.append(f"{requests.get(instance, 0):,}")
            table.append(row)
        title = "state"
        if state is not None:
            title += (
                f" as batch {summary.last_committed} left it (read in {document['state_read_s']:.1f} s "
                f"with Spark's state data source, after {document['spark_start_s']:.1f} s to start Spark)"
            )
        lines += ["", title, format_table(headers, table)]
    return "\n".join(lines)
