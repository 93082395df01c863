"""`router resolve`: run one routing scenario file and print every decision as one JSON line.

The scenario format and the printed fields are those of docs/scenarios.md. The reference
engine is pure Python; `--engine spark` decides the same batches with the Spark SQL engine.

Also runnable as `python -m streaming.commands.resolve [resolve] [--engine E] SCENARIO.yaml`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from streaming.devtools.scenario.loader import load_scenario
from streaming.devtools.scenario.runner import ScenarioRunner
from streaming.errors import RouterError
from streaming.rules.batch import Decider
from streaming.rules.engine import ReferenceEngine

ENGINES = ("reference", "spark")


def register(subparsers: Any) -> None:
    """Add the `resolve` sub-command to the `router` parser."""
    parser = subparsers.add_parser(
        "resolve",
        help="run a routing scenario file and print its decisions as JSON lines",
        description=(
            "Play a routing scenario (docs/scenarios.md): load the instance and its routing "
            "tables, play the timeline of messages, clock advances, route, ack and mirror events, "
            "and print one JSON object per routing decision, in the order the decisions are taken."
        ),
        epilog=(
            "Each line holds id, at, outcome and, as they apply, database, address, route, "
            "match_step, choice_step, reason, requests, hops_remaining. A message that is delayed "
            "and later re-routed has one line per attempt. Exit status 2 when the scenario file "
            "is invalid or the engine cannot start."
        ),
    )
    parser.add_argument("scenario", metavar="SCENARIO.yaml", help="the scenario file to run")
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default="reference",
        help="reference: the pure-Python rules (default); spark: the Spark SQL engine, on a local session",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the scenario with the chosen engine and print its decisions to stdout."""
    scenario = load_scenario(args.scenario)
    decisions = ScenarioRunner(make_decider(args.engine)).run(scenario)
    for decision in decisions:
        print(json.dumps(decision.to_json_dict()))
    return 0


def make_decider(engine: str) -> Decider:
    """Build the decider for `--engine`; the Spark one is imported only when asked for."""
    if engine == "reference":
        return ReferenceEngine()
    try:
        from streaming.spark.decider import SparkDecider
    except ImportError as exc:
        raise RouterError(f"the spark engine is not available ({exc}); use --engine reference") from exc
    return SparkDecider.create()


def main(argv: list[str] | None = None) -> int:
    """Entry point for `python -m streaming.commands.resolve`; a leading `resolve` word is optional."""
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] != ["resolve"]:
        words.insert(0, "resolve")
    parser = argparse.ArgumentParser(prog="router")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(words)
    try:
        return args.func(args)
    except RouterError as exc:
        print(f"router resolve: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
