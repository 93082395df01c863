"""`router replay`: route what the input topics hold now, then exit."""

from __future__ import annotations

import argparse

from streaming.commands.run import add_job_arguments, settings_from
from streaming.errors import RouterError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `replay` command."""
    parser = subparsers.add_parser(
        "replay",
        help="route everything the instance's input topics hold now (Trigger.AvailableNow), then exit",
        description=(
            "Run the same streaming job as `router run` with Trigger.AvailableNow: every record in the "
            "outbound and inbound topics up to now is routed, then the query stops. With --drain-delayed "
            "it then waits for delayed messages to fall due and re-routes them, until none wait or "
            "--max-wait seconds pass. Used by tests and to replay recorded traffic."
        ),
    )
    add_job_arguments(parser)
    parser.add_argument(
        "--drain-delayed",
        action="store_true",
        help="after the replay, re-route delayed messages as they fall due",
    )
    parser.add_argument(
        "--max-wait",
        type=float,
        default=60.0,
        metavar="S",
        help="how long --drain-delayed may wait (default 60 s)",
    )
    parser.set_defaults(func=replay)


def replay(args: argparse.Namespace) -> int:
    """Replay once; print what was routed."""
    from streaming.spark.job import RouterJob, run_until_drained
    from streaming.spark.session import build_session

    settings = settings_from(args)
    spark = build_session(
        f"router-replay-{settings.instance}", settings.spark_master, settings.shuffle_partitions
    )
    job = RouterJob(spark, settings)
    try:
        job.replay()
    except RouterError as exc:
        print(f"router replay: {exc}")
        return 1
    print(f"router replay: {job.routed} records routed in {job.batches} batches")
    if args.drain_delayed:
        left = run_until_drained(
            job, args.max_wait, progress=lambda text: print(f"router replay: {text}", flush=True)
        )
        print(f"router replay: {left} delayed message(s) still waiting; {job.routed} routed in all")
    return 0
