"""`router replay`: route what the input topics hold now, then exit."""

from __future__ import annotations

import argparse

from streaming.commands.run import (
    add_job_arguments,
    job_session,
    observed_job,
    settings_from,
    stop_on_signals,
)
from streaming.errors import RouterError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the `replay` command."""
    parser = subparsers.add_parser(
        "replay",
        help="route everything the instance's input topics hold now, then exit",
        description=(
            "Run the same streaming job as `router run`, micro-batches back to back, until it has routed "
            "every record the outbound and inbound topics held when it started (and read back what its own "
            "batches delayed and chose), then stop. With --drain-delayed it then waits for delayed "
            "messages to fall due and re-routes them, until none wait or --max-wait seconds pass. Used "
            "by tests and to replay recorded traffic. Ctrl-C stops it between micro-batches."
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
    """Replay once; print a line per micro-batch and what was routed."""
    from streaming.spark.job import run_until_drained
    from streaming.spark.progress import ProgressLines

    def say(text: str) -> None:
        print(f"router replay: {text}", flush=True)

    stop = stop_on_signals(say)
    settings = settings_from(args)
    spark = job_session(f"router-replay-{settings.instance}", settings, say, stop, verbose=args.verbose)
    if spark is None:
        return 0
    job, server = observed_job(spark, settings, say, count_jobs=args.verbose)
    try:
        job.replay(stop=stop, on_batch=ProgressLines().to(say))
        if args.drain_delayed and not stop.is_set():
            left = run_until_drained(job, args.max_wait, progress=say, stop=stop)
            say(f"{left} delayed message(s) still waiting")
    except RouterError as exc:
        say(f"error: {exc}")
        return 1
    finally:
        if server is not None:
            server.stop()
        job.close()
    if stop.is_set():
        say("stopped between micro-batches before the end")
    say(job.totals.summary())
    return 0
