"""`router run`: route one instance's traffic continuously, until stopped."""

from __future__ import annotations

import argparse
import logging

from streaming.commands.common import add_prefix_argument
from streaming.config import load_settings


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `run` command."""
    parser = subparsers.add_parser(
        "run",
        help="run the streaming router for one instance until stopped (Ctrl-C)",
        description=(
            "Start the Spark Structured Streaming query that routes the instance's outbound and inbound "
            "topics: each micro-batch is decided against the current route snapshot and written to its "
            "destination topics. Delayed messages are re-routed when due (the catalog's retry_s). "
            "Progress is printed every 10 micro-batches. The query resumes from its checkpoint."
        ),
    )
    add_job_arguments(parser)
    parser.set_defaults(func=run)


def add_job_arguments(parser: argparse.ArgumentParser) -> None:
    """The settings flags shared by `run` and `replay`."""
    parser.add_argument("--config", metavar="FILE", help="settings YAML (see streaming/config.py for keys)")
    parser.add_argument("--instance", help="the instance to route for (overrides the settings file)")
    parser.add_argument(
        "--bootstrap", help="Kafka bootstrap servers (default 127.0.0.1:19092, env ROUTER_BOOTSTRAP)"
    )
    # No default here: a prefix from the settings file holds unless the flag is given.
    add_prefix_argument(parser, default=None)
    parser.add_argument(
        "--checkpoint-dir", help="where the query keeps its checkpoint (default .state/checkpoints/INSTANCE)"
    )
    parser.add_argument("--spark-master", help="Spark master URL (default local[2], env ROUTER_SPARK_MASTER)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every micro-batch")


def settings_from(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """Build the job settings from the file and the flags."""
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(asctime)s %(name)s %(message)s"
    )
    return load_settings(
        args.config,
        instance=args.instance,
        bootstrap=args.bootstrap,
        topic_prefix=args.topic_prefix,
        checkpoint_dir=args.checkpoint_dir,
        spark_master=args.spark_master,
    )


def run(args: argparse.Namespace) -> int:
    """Run until interrupted."""
    from streaming.spark.job import RouterJob
    from streaming.spark.session import build_session

    settings = settings_from(args)
    print(f"router run: {settings.describe()}", flush=True)
    spark = build_session(f"router-{settings.instance}", settings.spark_master, settings.shuffle_partitions)
    job = RouterJob(spark, settings)
    query = job.start(available_now=False)
    print(f"router run: query {query.name} started; Ctrl-C stops it", flush=True)
    seen = 0
    try:
        while query.isActive:
            query.awaitTermination(10)
            if job.batches != seen:
                seen = job.batches
                print(f"router run: {job.batches} batches, {job.routed} records routed", flush=True)
    except KeyboardInterrupt:
        print("router run: stopping", flush=True)
    finally:
        query.stop()
    return 0
