"""Data-dependent routing on the real broker: routing services, the router and endpoints all running.

Instance i1 hosts an initiator (AW), three regional services (SalesEast, SalesWest, SalesNorth, one
database each: the partitioned data) and routing services: SalesRouter forwards, with a classifier
over XML bodies, and runs twice (databases Sales and Sales2, behind two equal routes in AW's table:
the copies share the conversations round-robin, M3); SalesRedirector (in Sales) redirects, with one
over JSON bodies. Every hop goes through the router's job (LOCAL routes), and every side is an
`Endpoint` (acks, resends, order).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from streaming import topics
from streaming.config import load_settings
from streaming.ddr.answers import CLASSIFY_FAILED, REDIRECT_MESSAGE_TYPE, parse_redirect
from streaming.ddr.config import parse_routing_service
from streaming.ddr.service import RoutingService
from streaming.endpoint import Endpoint
from streaming.endpoint.endpoint import Dialog, Received
from streaming.endpoint.protocol import END_DIALOG, ERROR
from streaming.rules.model import Database, Instance, Route
from streaming.spark.classifier import Classifier
from streaming.spark.job import RouterJob
from streaming.tables.topic_io import publish_catalogs, put_route
from tests.running import Running

pytestmark = pytest.mark.integration

REGIONS = ("SalesEast", "SalesWest", "SalesNorth")
DATABASES = (
    Database("AW", "0a0a0a0a-0000-0000-0000-000000000001", True, ("InitiatorService",)),
    Database("Sales", "0b0b0b0b-0000-0000-0000-000000000001", True, ("SalesRouter", "SalesRedirector")),
    Database("Sales2", "0b0b0b0b-0000-0000-0000-000000000002", True, ("SalesRouter",)),
    *(
        Database(region.removeprefix("Sales"), f"0c0c0c0c-0000-0000-0000-00000000000{n}", True, (region,))
        for n, region in enumerate(REGIONS, 1)
    ),
    Database("msdb", "0d0d0d0d-0000-0000-0000-000000000001", True, ()),
)
I1 = Instance("i1", "TCP://i1:4022", DATABASES, retry_s=2.0)
FORWARD = """
routing_service:
  service: SalesRouter
  database: Sales
  mode: forward
  classifier: "xpath_string(cast(body as string), '/message/toServiceName')"
"""
REDIRECT = """
routing_service:
  service: SalesRedirector
  database: Sales
  mode: redirect
  classifier: "concat('Sales', get_json_object(cast(body as string), '$.region'))"
"""
RETRY_S = 1.0
"""Endpoints resend after a second: the tests wait less for what a slow first batch left unacked."""
WAIT_S = 300.0
"""How long one step may wait for its answer: four trips through the router's job, each a micro-batch,
on a machine that may be running other Spark tests beside this one."""


def xml(region: str, extra: str = "") -> bytes:
    return f"<message><toServiceName>{region}</toServiceName>{extra}</message>".encode()


@dataclass
class Region:
    """A regional service: answers each message with `REGION:body`, ends on `end`, fails on `fail`.

    Its endpoint is made, used and closed by the thread that serves it (a store is one thread's).
    """

    service: str
    make: Callable[[str, str], Endpoint]
    got: list[tuple[str, str, bytes]] = field(default_factory=list)
    """(conversation, message type, body) of everything it received."""

    def serve(self, stop: threading.Event) -> None:
        with self.make(self.service.removeprefix("Sales"), self.service) as endpoint:
            while not stop.is_set():
                for m in endpoint.receive(timeout_s=0.5):
                    self.got.append((m.dialog.conversation_id, m.message_type, m.body))
                    if m.is_end_dialog or m.is_error or m.body.startswith(b"end"):
                        m.dialog.end()
                    elif m.body.startswith(b"fail"):
                        m.dialog.end_with_error(50, "region closed")
                    else:
                        m.dialog.send(self.service.encode() + b":" + m.body, "Reply")
            endpoint.wait_acknowledged(5)


class Initiator:
    """The initiator's endpoint, and what arrived on each of its dialogs."""

    def __init__(self, endpoint: Endpoint, running: Running, state: Callable[[], str]) -> None:
        self.endpoint = endpoint
        self.running = running
        self.state = state
        """What the other parts did, for a failure's message."""
        self.got: dict[str, list[Received]] = {}

    def begin(self, service: str, body: bytes) -> Dialog:
        dialog = self.endpoint.begin_dialog(service)
        dialog.send(body)
        return dialog

    def until(self, done: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
        """Keep the initiator's endpoint working (acks, resends) until `done`."""
        deadline = time.monotonic() + timeout_s
        while not done():
            assert time.monotonic() < deadline, f"waited {timeout_s} s for {what}; {self.state()}"
            self.running.check()
            for m in self.endpoint.receive(timeout_s=0.5):
                self.got.setdefault(m.dialog.conversation_id, []).append(m)

    def wait(
        self, dialog: Dialog, what: Callable[[list[Received]], bool], timeout_s: float = WAIT_S
    ) -> list[Received]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.running.check()
            for m in self.endpoint.receive(timeout_s=0.5):
                self.got.setdefault(m.dialog.conversation_id, []).append(m)
            got = self.got.get(dialog.conversation_id, [])
            if what(got):
                return got
        got = self.got.get(dialog.conversation_id, [])
        raise AssertionError(
            f"dialog {dialog.conversation_id}: waited {timeout_s} s; got {got}; {self.state()}"
        )


def types(messages: list[Received]) -> list[str]:
    return [m.message_type for m in messages]


def test_routing_services_forward_and_redirect_by_what_messages_hold(
    spark: SparkSession, kafka_bootstrap: str, tmp_path: Path
) -> None:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    publish_catalogs(kafka_bootstrap, [I1], topics.catalogs_topic(prefix))
    routes = [Route(d.name, "AutoCreatedLocal", "LOCAL") for d in DATABASES]
    routes += [
        Route("AW", f"SalesRouter{n}", "LOCAL", service="SalesRouter", broker_instance=d.broker_instance)
        for n, d in enumerate(DATABASES[1:3], 1)
    ]
    for route in routes:
        put_route(kafka_bootstrap, "i1", route, topics.routes_topic(prefix))
    answers: dict[str, list[str]] = {"Sales": [], "Sales2": []}

    def endpoint(database: str, service: str) -> Endpoint:
        return Endpoint(
            kafka_bootstrap,
            instance="i1",
            database=database,
            service=service,
            store=tmp_path / f"{service}.db",
            prefix=prefix,
            retry_first_s=RETRY_S,
        )

    def routing_service(text: str, database: str = "Sales") -> Callable[[threading.Event], object]:
        """A routing service, made, served and closed by the thread that runs it."""
        config = replace(parse_routing_service(text, "ddr.yaml"), database=database)
        classify = Classifier(spark, config.classifier).classify_received

        def serve(stop: threading.Event) -> None:
            service = RoutingService(
                kafka_bootstrap,
                "i1",
                config,
                classify,
                store=tmp_path / f"{config.database}.{config.service}.db",
                prefix=prefix,
                retry_first_s=RETRY_S,
                on_answer=answers.setdefault(database, []).append,
            )
            try:
                service.serve(stop)
            finally:
                service.close()

        return serve

    running = Running()
    job = RouterJob(
        spark,
        load_settings(
            None,
            instance="i1",
            bootstrap=kafka_bootstrap,
            topic_prefix=prefix,
            checkpoint_dir=str(tmp_path / "checkpoint"),
        ),
    )
    regions = {r: Region(r, endpoint) for r in REGIONS}
    forwarder, redirector = routing_service(FORWARD), routing_service(REDIRECT)

    def state() -> str:
        received = {r: [(c[:8], t) for c, t, _ in region.got] for r, region in regions.items()}
        return (
            f"the job ran {job.batches} batches; the routing services: {answers}; the regions got: {received}"
        )

    initiator = Initiator(endpoint("AW", "InitiatorService"), running, state)
    try:
        running.start(job.run)
        for region in regions.values():
            running.start(region.serve)
        forwarding = [running.start(forwarder), running.start(routing_service(FORWARD, "Sales2"))]
        running.start(redirector)

        # Forward: each first message goes to the region it names, and the answer comes back.
        east = initiator.begin("SalesRouter", xml("SalesEast", "<q>1</q>"))
        west = initiator.begin("SalesRouter", xml("SalesWest"))
        north = initiator.begin("SalesRouter", xml("SalesNorth"))
        failing = initiator.begin("SalesRouter", xml("SalesNorth"))
        unreadable = initiator.begin("SalesRouter", b"<message><toServiceName>")
        nowhere = initiator.begin("SalesRouter", b"<message><to>nobody</to></message>")
        got = initiator.wait(east, lambda g: len(g) >= 1)
        assert (got[0].message_type, got[0].body) == ("Reply", b"SalesEast:" + xml("SalesEast", "<q>1</q>"))
        assert got[0].far_service == "SalesRouter"
        for dialog, region_name in ((west, "SalesWest"), (north, "SalesNorth"), (failing, "SalesNorth")):
            got = initiator.wait(dialog, lambda g: len(g) >= 1)
            assert got[0].body.startswith(region_name.encode() + b":")
        # A message the classifier fails on, or finds nothing in, ends its dialog with the reason.
        for dialog, reason in ((unreadable, "the classifier failed"), (nowhere, "gave no service")):
            (error,) = initiator.wait(dialog, lambda g: len(g) >= 1)
            assert error.is_error and error.error is not None
            assert error.error.code == CLASSIFY_FAILED and reason in error.error.description

        # The two copies of SalesRouter took the six new conversations in turn (C5, M3).
        for database in ("Sales", "Sales2"):
            firsts = [a for a in answers[database] if "classified" in a or "not routed" in a]
            assert len(firsts) == 3, answers

        # The routing services stop and start again: the mappings are in their stores.
        for stopping in forwarding:
            running.stop(stopping)
        for database in ("Sales", "Sales2"):
            running.start(routing_service(FORWARD, database))

        # Later messages follow the mapping, unclassified (this body names no service).
        east.send(b"<second/>")
        got = initiator.wait(east, lambda g: len(g) >= 2)
        assert got[1].body == b"SalesEast:<second/>"
        # The initiator ends: the region's dialog ends too.
        east.end()
        initiator.until(
            lambda: any(t == END_DIALOG for _, t, _ in regions["SalesEast"].got), "East's EndDialog"
        )
        # The region ends: the initiator's dialog ends.
        west.send(b"end, please")
        initiator.wait(west, lambda g: bool(g) and g[-1].is_end_dialog)
        # The region fails: the initiator gets an Error that wraps it.
        failing.send(b"fail now")
        got = initiator.wait(failing, lambda g: bool(g) and g[-1].is_error)
        wrapped = got[-1].error
        assert wrapped is not None and wrapped.code == 50
        assert "SalesNorth" in wrapped.description and "region closed" in wrapped.description
        # The initiator fails: the region gets an Error that wraps it.
        north.end_with_error(7, "cancelled by the initiator")
        initiator.until(
            lambda: any(
                t == ERROR and b"cancelled by the initiator" in b for _, t, b in regions["SalesNorth"].got
            ),
            "North's Error",
        )

        # Redirect: the answer names the region; the initiator then talks to it directly.
        asked = initiator.begin("SalesRedirector", b'{"region": "West"}')
        got = initiator.wait(asked, lambda g: any(m.is_end_dialog for m in g))
        assert types(got) == [REDIRECT_MESSAGE_TYPE, END_DIALOG]
        target, broker = parse_redirect(got[0].body)
        assert (target, broker) == ("SalesWest", None)
        asked.end()
        direct = initiator.begin(target, b"hello")
        got = initiator.wait(direct, lambda g: len(g) >= 1)
        assert got[0].body == b"SalesWest:hello" and got[0].far_service == "SalesWest"
        running.check()
    finally:
        running.stop_all()
        initiator.endpoint.close()
        job.close()
    running.check()
    # What each region received: the forwarded first messages and what followed, never a repeat.
    east_got = [(t, b) for _, t, b in regions["SalesEast"].got]
    assert east_got[:2] == [("DEFAULT", xml("SalesEast", "<q>1</q>")), ("DEFAULT", b"<second/>")]
    assert east_got[2][0] == END_DIALOG
    for region in regions.values():
        keys = [(c, t, b) for c, t, b in region.got]
        assert len(keys) == len(set(keys)), region.got
