"""The `router` command: a thin dispatcher over one module per command in `streaming.commands`."""

from __future__ import annotations

import argparse
import importlib
import sys

from streaming.errors import RouterError

# Each module exposes `register(subparsers)`, which adds its sub-command and sets `func`.
COMMANDS = (
    "kafka",
    "spark",
    "routes",
    "catalogs",
    "mirrors",
    "send",
    "tail",
    "status",
    "explain",
    "run",
    "replay",
    "redrive",
    "checkpoint",
    "resolve",
    "directory",
    "ddr",
    "demo",
    "whatif",
)


def build_parser() -> argparse.ArgumentParser:
    """Return the parser with every command's sub-parser registered."""
    parser = argparse.ArgumentParser(
        prog="router",
        description="Service Broker routing on Kafka, with Spark Structured Streaming.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        module = importlib.import_module(f"streaming.commands.{name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one `router` command; a RouterError prints its message and exits 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except RouterError as exc:
        print(f"router {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
