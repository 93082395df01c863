"""Parse or run a `router` command in the test's own process, as the command line would."""

from __future__ import annotations

import argparse

from streaming.cli import build_parser


def parse(argv: list[str]) -> argparse.Namespace:
    """`argv` parsed by the `router` parser (every command registered)."""
    return build_parser().parse_args(argv)


def run_command(argv: list[str]) -> int:
    """Parse `argv` and run its command; a RouterError is raised, not printed.

    `streaming.cli.main` turns a RouterError into a line on stderr and exit 2; a test that checks the
    error's words calls the command through here instead.
    """
    args = parse(argv)
    return int(args.func(args) or 0)
