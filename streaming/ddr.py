"""Data-dependent routing: a service that sends each conversation where its first message says.

When data is partitioned (sales by region, one service per region), routes cannot say where a
message goes: what is inside it does. A routing service is a service
like any other, hosted in a database of an instance: initiators begin dialogs with it, and it
classifies the first message of each with a classifier, a Spark SQL expression over the message
(`streaming.spark.classifier`), to find the target service. Then, in `forward` mode:

* it begins a dialog with the target service (routed by the ordinary rules), keeps the mapping of
  the inbound dialog to the outbound one (its `resolved_conversations` table), and forwards the
  message; later messages of the inbound dialog follow the mapping, unclassified;
* what the target sends back on the outbound dialog goes back on the inbound one;
* EndDialog on either side ends the other side too, and an Error on either side ends the other with
  an Error that wraps it; the mapping goes with them;
* a first message the classifier fails on, or finds no service in, ends the inbound dialog with an
  Error that says why (code `CLASSIFY_FAILED`).

In `redirect` mode it forwards nothing: it answers the first message with a `REDIRECT_MESSAGE_TYPE`
message naming the target service (and broker instance) and ends the dialog; the initiator begins
a dialog with the target itself (`parse_redirect` reads the answer).

The service is an `Endpoint` (acks, resends, order: docs/rules.md §1.8), and each batch of messages
it takes is handled in one transaction of the endpoint's store, with the mappings in the same file:
a service killed at any moment takes the batch again at its next start, and begins the same outbound
dialogs again (their ids are derived from the inbound ones), so the targets drop the repeats (A4) and no
message is lost or forwarded twice. Several routing services behind equal routes share the
conversations round-robin (C5). Given `metrics_port`, the service serves `/metrics` (its answers by
`answered_with`, its classifications, and its endpoint's figures: `streaming.observe.ddr_metrics`)
and `/healthz` (200 while its loop polls and Kafka answers) until `close`. A routing service file:

    # routes/ddr/sales.yaml
    routing_service:
      service: SalesRouter            # the service initiators begin dialogs with
      database: Sales                 # the database of the instance that hosts it
      mode: forward                   # or redirect
      classifier: "xpath_string(cast(body as string), '/message/toServiceName')"
      lifetime_s: 3600                # of each outbound dialog (optional: none)
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from xml.sax.saxutils import escape

from streaming import topics
from streaming.endpoint import Endpoint
from streaming.endpoint.endpoint import Dialog, Received
from streaming.endpoint.protocol import DESCRIPTION_MAX, END_DIALOG, ERROR, RETRY_FIRST_S
from streaming.endpoint.store import DialogClosed
from streaming.errors import ConfigError, MalformedRecord
from streaming.kafka.connection import Kafka
from streaming.observe.ddr_metrics import ROUTED, UNROUTED, DdrCollector, DdrFigures
from streaming.observe.server import DEFAULT_HOST, Health, MetricsServer, new_registry, serve
from streaming.observe.services import HEALTH_BOUND_S
from streaming.tables.validate import (
    Source,
    check_known_fields,
    check_seconds,
    check_service,
    check_sysname,
    fail,
)
from streaming.tables.yaml_files import LineDict, entry_mapping, parse_yaml, read_text

log = logging.getLogger("streaming.ddr")

SERVICE_FIELDS = ("service", "database", "mode", "classifier", "lifetime_s")
REDIRECT_MESSAGE_TYPE = "router.v1/DataDependentRouting/Redirect"
"""The answer of a redirecting routing service: `<redirect><service/><broker_instance/></redirect>`."""
CLASSIFY_FAILED = 1
"""The Error code a routing service ends a dialog with when it cannot classify its first message."""
FORWARDED_ERROR = 2
"""The Error code of a forwarded error whose own code is the broker's (not > 0, §1.15)."""
DIALOG_CLOSED = 3
"""The Error code a routing service ends a conversation with when one of its dialogs cannot carry
what the other brought (it ended, failed, or its lifetime passed)."""
_OUTBOUND_IDS = uuid.UUID("0c7e5f2a-4b6d-4e8f-9a1b-3d5c7e9f1a2b")
"""The namespace of outbound dialog ids, derived from the routing service and the inbound dialog."""
BATCH = 100
"""Messages taken, classified and answered in one transaction."""


@dataclass(frozen=True)
class Classification:
    """Where a first message goes: a service (and maybe a broker instance), or why it cannot go."""

    service: str | None = None
    broker_instance: str | None = None
    error: str | None = None


class Mode(str, Enum):
    """What a routing service does with a classified conversation."""

    FORWARD = "forward"
    REDIRECT = "redirect"


@dataclass(frozen=True)
class RoutingServiceConfig:
    """A routing service as its file declares it (see the module docstring)."""

    service: str
    database: str
    mode: Mode
    classifier: str
    lifetime_s: float | None = None
    file: str = ""


def parse_routing_service(text: str, file: str) -> RoutingServiceConfig:
    """Parse a routing service file (see the module docstring); errors name file, line and field."""
    document = parse_yaml(text, file)
    subject = "routing_service"
    if not isinstance(document, LineDict) or set(document) != {"routing_service"}:
        raise ConfigError(
            f"{file}: expected one top-level mapping, 'routing_service:' (see `router ddr --help`)"
        )
    where = Source(file, document.line_of("routing_service"))
    mapping = entry_mapping(document["routing_service"], where, subject)
    where = where.at(mapping.line)
    check_known_fields(mapping, SERVICE_FIELDS, where, subject)
    for required in ("service", "database", "mode", "classifier"):
        if required not in mapping:
            fail(where, subject, "required", required)
    service = check_service(mapping["service"], where.at(mapping.line_of("service")), subject)
    database = check_sysname(mapping["database"], where.at(mapping.line_of("database")), subject, "database")
    mode_text = mapping["mode"]
    if mode_text not in {m.value for m in Mode}:
        fail(
            where.at(mapping.line_of("mode")),
            subject,
            f"expected forward or redirect, got {mode_text!r}",
            "mode",
        )
    classifier = mapping["classifier"]
    if not isinstance(classifier, str) or not classifier.strip():
        fail(
            where.at(mapping.line_of("classifier")), subject, "expected a Spark SQL expression", "classifier"
        )
    lifetime = None
    if mapping.get("lifetime_s") is not None:
        at = where.at(mapping.line_of("lifetime_s"))
        lifetime = check_seconds(mapping["lifetime_s"], at, subject, "lifetime_s", positive=True)
    return RoutingServiceConfig(service, database, Mode(mode_text), classifier.strip(), lifetime, file)


def load_routing_service(path: Path) -> RoutingServiceConfig:
    """Read and parse a routing service file (see `parse_routing_service`)."""
    return parse_routing_service(read_text(path), str(path))


# --- what the service does with a message: pure --------------------------------------------------


@dataclass(frozen=True)
class Mapping:
    """An inbound dialog and the outbound dialog it was forwarded on (`resolved_conversations`)."""

    inbound: str
    outbound: str
    service: str
    broker_instance: str | None = None


class Act(str, Enum):
    """One step of the answer to a message."""

    BEGIN = "begin"
    """Begin the outbound dialog (`mapping`) and keep the mapping."""
    SEND_OUT = "send_out"
    """Send the message's type and body on the outbound dialog."""
    SEND_IN = "send_in"
    """Send the message's type and body on the inbound dialog."""
    REDIRECT = "redirect"
    """Answer on the inbound dialog with the target (`REDIRECT_MESSAGE_TYPE`)."""
    END_OUT = "end_out"
    END_IN = "end_in"
    FAIL_OUT = "fail_out"
    """End the outbound dialog with an Error (`code`, `description`)."""
    FAIL_IN = "fail_in"
    """End the inbound dialog with an Error (`code`, `description`)."""
    FORGET = "forget"
    """Remove the mapping."""


@dataclass(frozen=True)
class Step:
    """One step, with what it needs."""

    act: Act
    code: int = 0
    description: str = ""


@dataclass(frozen=True)
class Answer:
    """What the service does with one message: its steps in order, and a line for people."""

    steps: tuple[Step, ...]
    line: str


def answer(
    service: str,
    *,
    inbound: bool,
    message_type: str,
    error: tuple[int, str] | None,
    mapping: Mapping | None,
    mode: Mode,
    target: Classification | None = None,
) -> Answer:
    """What routing service `service` does with a message (see the module docstring).

    `inbound`: the message came on a dialog an initiator began with the service; else on an
    outbound dialog the service began. `error` is an Error's code and description; `mapping` the
    dialog's mapping, if any; `target` the first message's classification, given only when the
    message needs one.
    """
    end, failed = message_type == END_DIALOG, message_type == ERROR
    if inbound:
        if end or failed:
            if mapping is None:
                return Answer((Step(Act.END_IN),), "the initiator ended an unmapped dialog")
            if end:
                steps = (Step(Act.END_OUT), Step(Act.END_IN), Step(Act.FORGET))
                return Answer(steps, f"the initiator ended the dialog: ended {mapping.service}'s too")
            code, text = wrapped(service, "the initiator", error)
            steps = (Step(Act.FAIL_OUT, code, text), Step(Act.END_IN), Step(Act.FORGET))
            return Answer(steps, f"the initiator's error passed on to {mapping.service}")
        if mapping is not None:
            return Answer((Step(Act.SEND_OUT),), f"forwarded to {mapping.service}")
        if target is None:
            raise ValueError("a first message needs its classification")
        to, reason = target.service, target.error
        if to is None:
            description = f"{service} could not route the conversation: {reason}"[:DESCRIPTION_MAX]
            return Answer((Step(Act.FAIL_IN, CLASSIFY_FAILED, description),), f"not routed: {reason}")
        if mode is Mode.REDIRECT:
            return Answer((Step(Act.REDIRECT), Step(Act.END_IN)), f"redirected to {to}")
        return Answer((Step(Act.BEGIN), Step(Act.SEND_OUT)), f"classified: forwarded to {to}")
    if mapping is None:
        if end or failed:
            return Answer((Step(Act.END_OUT),), "a target ended a dialog no longer mapped")
        return Answer((), f"a {message_type} message on a dialog no longer mapped was left")
    if end:
        steps = (Step(Act.END_IN), Step(Act.END_OUT), Step(Act.FORGET))
        return Answer(steps, f"{mapping.service} ended the dialog: ended the initiator's too")
    if failed:
        code, text = wrapped(service, mapping.service, error)
        steps = (Step(Act.FAIL_IN, code, text), Step(Act.END_OUT), Step(Act.FORGET))
        return Answer(steps, f"{mapping.service}'s error passed on to the initiator")
    return Answer((Step(Act.SEND_IN),), f"{mapping.service}'s answer passed back")


LEFT = "none"
"""What an answer without steps did: the message came on a dialog no longer mapped, and was left."""
CLOSED = "closed"
"""What the answer of a message its other dialog could not carry did: both ended with `DIALOG_CLOSED`."""
ANSWERS = (*(act.value for act in Act if act is not Act.FORGET), LEFT, CLOSED)
"""What a message's answer did, as its metrics name it (`answered_with`): FORGET never comes first."""


def answered_with(reply: Answer) -> str:
    """What an answer did, in one word of `ANSWERS`: its first step's act, or `LEFT` when it has none."""
    return reply.steps[0].act.value if reply.steps else LEFT


def wrapped(service: str, who: str, error: tuple[int, str] | None) -> tuple[int, str]:
    """An Error that wraps the one that arrived: its code when an application's, and its text."""
    code, description = error or (0, "no description")
    own = code if code > 0 else FORWARDED_ERROR
    text = f"{service} passes on the error {who} ended the dialog with: {code}: {description}"
    return own, text[:DESCRIPTION_MAX]


def outbound_id(service: str, database: str, inbound: str) -> str:
    """The id of the dialog a routing service begins for an inbound dialog: the same at every try."""
    return str(uuid.uuid5(_OUTBOUND_IDS, f"{database}/{service}/{inbound}"))


def redirect_body(service: str, broker_instance: str | None) -> bytes:
    """The body of a redirect answer (`REDIRECT_MESSAGE_TYPE`)."""
    broker = (
        "" if broker_instance is None else f"<broker_instance>{escape(broker_instance)}</broker_instance>"
    )
    return f"<redirect><service>{escape(service)}</service>{broker}</redirect>".encode()


def parse_redirect(body: bytes) -> tuple[str, str | None]:
    """The service (and broker instance) a redirect answer names; MalformedRecord when none."""
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise MalformedRecord(f"a redirect's body is not XML: {exc}") from exc
    service = root.findtext("service")
    if not service:
        raise MalformedRecord(f"a redirect's body names no service: {body[:120]!r}")
    return service, root.findtext("broker_instance") or None


# --- the service -------------------------------------------------------------------------------


_MAPPINGS = (
    "CREATE TABLE IF NOT EXISTS resolved_conversations (inbound TEXT PRIMARY KEY, "
    "outbound TEXT NOT NULL UNIQUE, service TEXT NOT NULL, broker_instance TEXT)"
)
"""The mappings, in the endpoint's store file: they commit with the dialogs."""


class RoutingService:
    """A data-dependent routing service of one instance (see the module docstring).

    `classify` classifies a batch of first messages (`streaming.spark.classifier.Classifier`'s
    `classify_received`, or any function alike); `serve(stop)` answers until `stop` is set. Given
    `metrics_port`, its metrics and health are served until `close`; `health_bound_s` is how long
    its loop may go without polling, or Kafka without answering it, and still be healthy.
    """

    def __init__(
        self,
        kafka: Kafka,
        instance: str,
        config: RoutingServiceConfig,
        classify: Callable[[Sequence[Received]], Sequence[Classification]],
        *,
        store: str | Path,
        prefix: str = topics.DEFAULT_PREFIX,
        on_answer: Callable[[str], None] | None = None,
        retry_first_s: float = RETRY_FIRST_S,
        metrics_port: int = 0,
        metrics_host: str = DEFAULT_HOST,
        health_bound_s: float = HEALTH_BOUND_S,
    ) -> None:
        self.config = config
        self.classify = classify
        self.on_answer = on_answer
        self.endpoint = Endpoint(
            kafka,
            instance=instance,
            database=config.database,
            service=config.service,
            store=store,
            prefix=prefix,
            retry_first_s=retry_first_s,
            health_bound_s=health_bound_s,
        )
        self.figures = DdrFigures()
        self.metrics_server: MetricsServer | None = None
        try:
            with self.endpoint.transaction() as db:
                db.execute(_MAPPINGS)
            if metrics_port:
                registry = new_registry()
                self.endpoint.observe(registry)
                labels = {"instance": instance, "database": config.database, "service": config.service}
                registry.register(DdrCollector(labels, ANSWERS, self.figures))
                self.metrics_server = serve(registry, self.health, metrics_port, metrics_host)
        except BaseException:
            self.endpoint.close()
            raise
        self.answered = 0

    def close(self) -> None:
        """Stop serving metrics and health; close the endpoint (its store holds every mapping)."""
        self.endpoint.watch.stop("the routing service is closed")
        if self.metrics_server is not None:
            self.metrics_server.stop()
            self.metrics_server = None
        self.endpoint.close()

    def health(self) -> Health:
        """200 while the loop (the endpoint's pump) polls and Kafka answers it, each within the bound."""
        return self.endpoint.health()

    def serve(self, stop: threading.Event) -> int:
        """Answer what arrives until `stop` is set; return how many messages were answered."""
        watch = self.endpoint.watch
        watch.restart()
        try:
            while not stop.is_set():
                self.endpoint.pump(0.5)
                while self.step():
                    pass
        except BaseException as exc:
            watch.stop(f"the routing service failed: {exc!r}")
            raise
        finally:
            watch.stop("the routing service has stopped")  # kept only when no failure said why
        return self.answered

    def step(self) -> int:
        """Take up to `BATCH` queued messages and answer them in one transaction; return how many."""
        with self.endpoint.transaction() as db:
            received = self.endpoint.take(BATCH)
            if not received:
                return 0
            firsts = [
                m
                for m in received
                if not m.dialog.is_initiator
                and m.message_type not in (END_DIALOG, ERROR)
                and not m.is_timer
                and self._mapping(db, m.dialog) is None
            ]
            targets = dict(zip((id(m) for m in firsts), self.classify(firsts), strict=True))
            for target in targets.values():
                self.figures.classified(ROUTED if target.service is not None else UNROUTED)
            for message in received:
                if message.is_timer:
                    continue
                mapping = self._mapping(db, message.dialog)
                error = message.error
                reply = answer(
                    self.config.service,
                    inbound=not message.dialog.is_initiator,
                    message_type=message.message_type,
                    error=None if error is None else (error.code, error.description),
                    mapping=mapping,
                    mode=self.config.mode,
                    target=targets.get(id(message)),
                )
                line = f"{message.dialog.conversation_id}: {reply.line}"
                did = answered_with(reply)
                try:
                    with self.endpoint.transaction():  # a savepoint: this message's steps, or none
                        self._do(db, message, mapping, reply, targets.get(id(message)))
                except DialogClosed as exc:
                    line = (
                        f"{message.dialog.conversation_id}: {self._close(db, message.dialog, mapping, exc)}"
                    )
                    did = CLOSED
                self.answered += 1
                self.figures.answered(did, time.time())
                self.endpoint.watch.did(line)
                log.info("%s", line)
                if self.on_answer is not None:
                    self.on_answer(line)
        return len(received)

    def _close(
        self, db: sqlite3.Connection, here: Dialog, mapping: Mapping | None, error: DialogClosed
    ) -> str:
        """End both dialogs of a message that cannot be passed on, with an Error that says why.

        Its other dialog ended, failed or timed out: both end with `DIALOG_CLOSED`, and the mapping goes.
        """
        description = f"{self.config.service} cannot pass the conversation on: {error}"[:DESCRIPTION_MAX]
        sides = [here]
        if mapping is not None:
            other = (mapping.outbound, True) if not here.is_initiator else (mapping.inbound, False)
            found = self.endpoint.dialog(*other)
            sides += [found] if found is not None else []
            _forget(db, mapping)
        for side in sides:
            try:
                side.end_with_error(DIALOG_CLOSED, description)
            except DialogClosed:
                side.end()  # failed or ended already: it only ends here
        log.warning("%s: %s", here.conversation_id, description)
        return f"ended with an error: {description}"

    def _mapping(self, db: sqlite3.Connection, dialog: Dialog) -> Mapping | None:
        column = "outbound" if dialog.is_initiator else "inbound"
        row = db.execute(
            "SELECT inbound, outbound, service, broker_instance FROM resolved_conversations "
            f"WHERE {column} = ?",  # noqa: S608 (one of two column names)
            (dialog.conversation_id,),
        ).fetchone()
        return None if row is None else Mapping(*row)

    def _do(
        self,
        db: sqlite3.Connection,
        message: Received,
        mapping: Mapping | None,
        reply: Answer,
        target: Classification | None,
    ) -> None:
        endpoint = self.endpoint
        here = message.dialog
        inbound = here if not here.is_initiator else None
        outbound = here if here.is_initiator else None
        if mapping is not None:
            inbound = inbound or endpoint.dialog(mapping.inbound, False)
            outbound = outbound or endpoint.dialog(mapping.outbound, True)
        for step in reply.steps:
            if step.act is Act.BEGIN and target is not None and target.service is not None:
                service, broker = target.service, target.broker_instance
                begun = endpoint.begin_dialog(
                    service,
                    broker,
                    lifetime_s=self.config.lifetime_s,
                    conversation_id=outbound_id(
                        self.config.service, self.config.database, here.conversation_id
                    ),
                )
                db.execute(
                    "INSERT INTO resolved_conversations (inbound, outbound, service, broker_instance) "
                    "VALUES (?, ?, ?, ?)",
                    (here.conversation_id, begun.conversation_id, service, broker),
                )
                outbound = begun
            elif step.act is Act.SEND_OUT and outbound is not None:
                outbound.send(message.body, message.message_type)
            elif step.act is Act.SEND_IN and inbound is not None:
                inbound.send(message.body, message.message_type)
            elif step.act is Act.REDIRECT and inbound is not None and target is not None and target.service:
                inbound.send(redirect_body(target.service, target.broker_instance), REDIRECT_MESSAGE_TYPE)
            elif step.act is Act.END_OUT and outbound is not None:
                outbound.end()
            elif step.act is Act.END_IN and inbound is not None:
                inbound.end()
            elif step.act is Act.FAIL_OUT and outbound is not None:
                outbound.end_with_error(step.code, step.description)
            elif step.act is Act.FAIL_IN and inbound is not None:
                inbound.end_with_error(step.code, step.description)
            elif step.act is Act.FORGET and mapping is not None:
                _forget(db, mapping)


def _forget(db: sqlite3.Connection, mapping: Mapping) -> None:
    """Remove a mapping: its dialogs ended, or are ending in this transaction."""
    db.execute("DELETE FROM resolved_conversations WHERE inbound = ?", (mapping.inbound,))
