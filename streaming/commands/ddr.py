"""`router ddr`: a data-dependent routing service, sending each conversation where its content says.

    router ddr check routes/ddr/sales.yaml [MORE.yaml ...]
    router ddr serve routes/ddr/sales.yaml --instance i1

`check` reads the file and checks its classifier (a Spark SQL expression over the message's
columns: body, message_type, from_service, conversation_id, sequence_number) on a local Spark
session. `serve` runs the service: it reads the service's queue on the instance, classifies the
first message of each dialog begun with it, and forwards the conversation to the service the
classifier names (or, in redirect mode, answers with that service's name and ends the dialog).
One line per message answered; Ctrl-C or SIGTERM stops it, and a new start goes on where it
stopped (the dialogs and their mappings are in the store file). See `streaming/ddr/` for the
file's format and what the service does.

Two copies on one `--store` are a service and its standby: the second says so, starts its Spark
session, and waits; when the first stops or dies it takes the store over (its dialogs, what they
await acks for, its mappings) and the queue with it, within about 10 s of a kill. One process
serves a store at a time (a lock beside it), so the copies run on one machine, or on a shared
file system whose locks work across machines.

`--metrics-port PORT` serves Prometheus metrics at /metrics (messages answered by what was done,
classifications: `router_ddr_*`; the service's endpoint: `router_endpoint_*`) and a health check
at /healthz (200 while it polls its queue and Kafka answers, 503 with the reason otherwise).
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
    """Add `ddr` with its `check` and `serve` sub-commands."""
    serve = add_service_command(
        subparsers,
        "ddr",
        help="run a data-dependent routing service: classify each conversation, forward or redirect it",
        description=__doc__,
        file_help="the routing service YAML",
        check_help="check a routing service file and its classifier (starts Spark)",
        serve_help="run the routing service on an instance until stopped",
        run_check=run_check,
        run_serve=run_serve,
    )
    serve.add_argument(
        "--store",
        type=Path,
        help="the service's store file: dialogs and mappings "
        "(default .state/endpoints/INSTANCE.DATABASE.SERVICE.db)",
    )
    add_metrics_arguments(serve, "the routing service")


def run_check(args: argparse.Namespace) -> int:
    """Parse each file, check its classifier in Spark (one session for all), and say what it does."""
    from streaming.ddr.config import load_routing_service
    from streaming.spark.classifier import Classifier
    from streaming.spark.session import build_session

    spark = build_session("router-ddr-check", shuffle_partitions=1)

    def check(file: Path) -> str:
        config = load_routing_service(file)
        classifier = Classifier(spark, config.classifier, str(file))
        gives = "a service and a broker instance" if classifier.gives_struct else "a service name"
        mode = config.mode.value
        return f"{config.service} in database {config.database}: {mode}; the classifier gives {gives}"

    return check_each("ddr", args.files, check)


def run_serve(args: argparse.Namespace) -> int:
    """Serve until Ctrl-C or SIGTERM."""
    from streaming.ddr.config import load_routing_service
    from streaming.ddr.service import RoutingService
    from streaming.endpoint.store import StoreInUse, store_holder, wait_for_store
    from streaming.spark.classifier import Classifier
    from streaming.spark.session import build_session

    config = load_routing_service(args.file)
    classifier = Classifier(
        build_session("router-ddr", shuffle_partitions=1), config.classifier, str(args.file)
    )
    store = args.store or Path(".state/endpoints") / f"{args.instance}.{config.database}.{config.service}.db"
    stop = stop_on_signals()
    kafka = kafka_from(args)
    holder = store_holder(store)
    if holder is not None:
        print(f"standby: process {holder} serves {store}; this copy takes over when it stops", flush=True)
    while True:
        if not wait_for_store(store, stop):
            print("stopped while standing by; 0 message(s) answered", flush=True)
            return 0
        try:
            service = RoutingService(
                kafka,
                args.instance,
                config,
                classifier.classify_received,
                store=store,
                prefix=args.topic_prefix,
                on_answer=lambda line: print(line, flush=True),
                metrics_port=args.metrics_port,
                metrics_host=args.metrics_host,
            )
            break
        except StoreInUse:
            continue  # another standby took it first: wait for that one
    if holder is not None:
        print(f"taking over {store}: its dialogs, their unacknowledged messages and its queue", flush=True)
    print(
        f"{config.service} ({config.mode.value}) on {service.endpoint.queue}, store {store}; Ctrl-C stops",
        flush=True,
    )
    if service.metrics_server is not None:
        address = service.metrics_server.address
        print(served_at(address), flush=True)
    try:
        answered = service.serve(stop)
    finally:
        service.close()
    print(f"{answered} message(s) answered", flush=True)
    return 0
