"""`router directory`: the dynamic routing service, answering MissingRoute requests from a file.

    router directory check routes/directory.yaml
    router directory serve routes/directory.yaml --instance i1

`serve` reads the BrokerConfiguration service's queue of each database of the instance that hosts
`SQL/ServiceBroker/BrokerConfiguration` (the catalog says which), and answers every MissingRoute
request the router sends there (B6): for a service the file lists, it creates the route in
the table that asked and ends the request; for any other, it ends the request with an error. The
router routes the waiting conversations again at their next retry. One line per answer; Ctrl-C
or SIGTERM stops it. See `streaming/directory.py` for the file's format.

Copies started with the same `--group` share the queues as one consumer group: each request is
answered by one of them, and when one is killed the others are given its queues within about 10 s
(its group session) and answer what it had not committed (answering a request twice creates the
same route and ends the same request again).

`--metrics-port PORT` serves Prometheus metrics at /metrics (requests answered by result, records
left unanswered by reason, when it last answered: `router_directory_*`) and a health check at
/healthz (200 while it polls its queues and Kafka answers, 503 with the reason otherwise).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from streaming.commands.common import (
    add_metrics_arguments,
    add_service_command,
    check_each,
    kafka_from,
    served_at,
    stop_on_signals,
)


def register(subparsers: Any) -> None:
    """Add `directory` with its `check` and `serve` sub-commands."""
    serve = add_service_command(
        subparsers,
        "directory",
        help="run the dynamic routing service that answers MissingRoute requests (B1-B9)",
        description=__doc__,
        file_help="the directory YAML",
        check_help="check a directory file and list the services it knows",
        serve_help="answer the instance's MissingRoute requests from a directory file until stopped",
        run_check=run_check,
        run_serve=run_serve,
    )
    serve.add_argument(
        "--group", help="the consumer group that keeps its place (default router-directory-INSTANCE)"
    )
    add_metrics_arguments(serve, "the service")


def run_check(args: argparse.Namespace) -> int:
    """Parse each file; print each service with the route it would get."""
    from streaming.directory import load_directory

    def check(file: Path) -> str:
        directory = load_directory(file)
        lines = []
        for service, listing in sorted(directory.listings.items()):
            route = listing.route
            extra = "" if route.broker_instance is None else f" broker_instance {route.broker_instance}"
            lifetime = "" if listing.lifetime_s is None else f" for {listing.lifetime_s:g} s"
            lines.append(f"{service}: {route.address}{extra}{lifetime}")
        return "\n".join([*lines, f"{file}: {len(directory.listings)} service(s)"])

    return check_each("directory", args.files, check)


def run_serve(args: argparse.Namespace) -> int:
    """Answer requests until Ctrl-C or SIGTERM."""
    from streaming import topics
    from streaming.directory import DirectoryService, load_directory
    from streaming.tables.reader import read_instances

    directory = load_directory(args.file)
    kafka = kafka_from(args)
    catalogs = read_instances(kafka, topics.catalogs_topic(args.topic_prefix), [args.instance])
    service = DirectoryService(
        kafka,
        catalogs[args.instance],
        directory,
        prefix=args.topic_prefix,
        group=args.group,
        on_answer=lambda answer: print(answer.line(), flush=True),
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
    )
    with service:
        stop = stop_on_signals()
        print(
            f"answering MissingRoute requests on {', '.join(service.queues)} "
            f"from {args.file} ({len(directory.listings)} service(s)); Ctrl-C stops",
            flush=True,
        )
        if service.metrics_server is not None:
            address = service.metrics_server.address
            print(served_at(address), flush=True)
        answered = service.serve(stop)
    print(f"{answered} request(s) answered", flush=True)
    return 0
