"""`router run`: route one instance's traffic continuously, until stopped."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from streaming.config import Settings, load_settings
from streaming.spark.job import STOP_GRACE_S

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streaming.observe.server import MetricsServer
    from streaming.spark.job import RouterJob


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `run` command."""
    parser = subparsers.add_parser(
        "run",
        help="run the streaming router for one instance until stopped (Ctrl-C or SIGTERM)",
        description=(
            "Start the Spark Structured Streaming query that routes the instance's outbound and inbound "
            "topics: each micro-batch is decided against the current route snapshot and written to its "
            "destination topics, and a line per micro-batch says what it did. Delayed messages are "
            "re-routed when due (the catalog's retry_s). The query resumes from its checkpoint. "
            f"Ctrl-C or SIGTERM stops it between micro-batches (a batch still running after "
            f"{STOP_GRACE_S:.0f} s is cut short, and runs again at the next start) and exits 0; "
            "a second Ctrl-C stops at once."
        ),
    )
    add_job_arguments(parser)
    parser.set_defaults(func=run)


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    """The settings flags shared by `run` and `replay`."""
    from streaming.commands.common import add_kafka_arguments, add_metrics_arguments, add_prefix_argument

    parser.add_argument("--instance", help="the instance to route for (overrides the settings file)")
    add_kafka_arguments(parser)
    add_prefix_argument(parser, default=None)
    parser.add_argument(
        "--checkpoint-dir", help="where the query keeps its checkpoint (default .state/checkpoints/INSTANCE)"
    )
    parser.add_argument("--spark-master", help="Spark master URL (default local[2], env ROUTER_SPARK_MASTER)")
    parser.add_argument(
        "--start-after",
        metavar="DIR",
        help="a new checkpoint starts reading where the drained router of checkpoint_dir DIR stopped, "
        "instead of at the topics' first records (to change the number of state partitions: docs/topics.md)",
    )
    add_metrics_arguments(parser, "the router", from_settings=True)
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also show Spark's and Kafka's warnings (stderr) and each batch's Spark jobs and stages",
    )


def settings_from(args: argparse.Namespace) -> Settings:
    """Build the job settings from the file and the flags; a broker that does not answer is an error.

    The broker is asked, and the checkpoint's state partitions compared with the settings', before
    Spark starts: a wrong address or partition count is said in seconds, with the fix.
    """
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(asctime)s %(name)s %(message)s"
    )
    from streaming.commands.common import config_path
    from streaming.kafka.admin import require_broker

    settings = load_settings(
        config_path(args),
        instance=args.instance,
        bootstrap=args.bootstrap,
        topic_prefix=args.topic_prefix,
        checkpoint_dir=args.checkpoint_dir,
        spark_master=args.spark_master,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
        start_after=args.start_after,
    )
    from streaming.spark.checkpoint import check_state_partitions, query_folder

    if isinstance(settings.checkpoint_dir, Path):  # a URL's files are read once Spark has started
        query = query_folder(settings.checkpoint_dir)
        check_state_partitions(query, settings.shuffle_partitions, settings.shuffle_partitions_named)
    require_broker(settings.kafka)
    return settings


def stop_on_signals(say: Callable[[str], None], stop: threading.Event | None = None) -> threading.Event:
    """An event set by the first SIGINT or SIGTERM; a second one ends the process at once (exit 130).

    Call it again, with the same event, once the SparkSession is built: PySpark's SparkContext puts
    in its own SIGINT handler, which cancels every Spark job at once (the batch in flight with it).
    """
    stop = stop if stop is not None else threading.Event()

    def handle(signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if stop.is_set():
            say(f"{name} again: stopping at once; the micro-batch in flight runs again at the next start")
            # At once: no cleanup. An exception raised here would surface in whatever call to the
            # JVM the main thread was in, leave py4j's connection half-read, and end in tracebacks
            # from the stop that follows. Spark's JVM sees its input close and ends itself; the
            # checkpoint is left as by a crash, and the next start resumes from it.
            os._exit(130)
        stop.set()
        say(f"{name}: stopping after the micro-batch in flight (Ctrl-C again stops at once)")

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)
    return stop


def job_session(
    app_name: str, settings: Settings, say: Callable[[str], None], stop: threading.Event, *, verbose: bool
) -> SparkSession | None:
    """The job's SparkSession, with `stop_on_signals`' handlers put back after PySpark's own.

    With a `spark://` master, the master is waited for first (`wait_for_master`), and a stop asked
    for meanwhile ends the wait: then the command stops before Spark starts (None).
    """
    from streaming.spark.session import build_session, wait_for_master

    if settings.spark_master.startswith("spark://"):
        wait_for_master(settings.spark_master, say=say, stop=stop)
        if stop.is_set():
            say("stopped before the Spark master answered")
            return None
    spark = build_session(
        app_name, settings.spark_master, settings.shuffle_partitions, verbose=verbose, say=say
    )
    stop_on_signals(say, stop)
    return spark


def run(args: argparse.Namespace) -> int:
    """Run until a signal asks to stop; print a line per micro-batch (`ProgressLines`) and a summary."""
    from streaming.spark.progress import ProgressLines

    def say(text: str) -> None:
        print(f"router run: {text}", flush=True)

    stop = stop_on_signals(say)
    settings = settings_from(args)
    say(settings.describe())
    spark = job_session(f"router-{settings.instance}", settings, say, stop, verbose=args.verbose)
    if spark is None:
        return 0
    job, server = observed_job(spark, settings, say, count_jobs=args.verbose)
    try:
        if stop.is_set():
            return 0
        say(f"routing instance {', '.join(settings.instances)}; Ctrl-C stops it")
        abandoned = job.run(stop, on_batch=ProgressLines().to(say))
        if stop.is_set():
            cut = (
                "; the micro-batch in flight was cut short and runs again at the next start"
                if abandoned
                else ""
            )
            say(f"stopped between micro-batches{cut}")
        say(job.totals.summary())
    finally:
        if server is not None:
            server.stop()
        job.close()
    spark.stop()
    return 0


def observed_job(
    spark: SparkSession, settings: Settings, say: Callable[[str], None], *, count_jobs: bool = False
) -> tuple[RouterJob, MetricsServer | None]:
    """The job, with its metrics and health served when `settings.metrics_port` asks for it."""
    from streaming.commands.common import served_at
    from streaming.observe.server import serve
    from streaming.spark.job import RouterJob, input_topics
    from streaming.spark.metrics import RouterMetrics

    if not settings.metrics_port:
        return RouterJob(spark, settings, count_jobs=count_jobs), None
    metrics = RouterMetrics(settings.instances, input_topics(settings))
    job = RouterJob(spark, settings, count_jobs=count_jobs, metrics=metrics)
    server = serve(metrics.registry, job.health, settings.metrics_port, settings.metrics_host)
    if server is not None:
        say(served_at(server.address))
    return job, server
