"""The routing service on Kafka: it takes messages, classifies, answers and commits (`streaming.ddr`)."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from streaming import topics
from streaming.ddr.answers import (
    ANSWERS,
    CLOSED,
    DIALOG_CLOSED,
    REDIRECT_MESSAGE_TYPE,
    Act,
    Answer,
    Classification,
    Mapping,
    answer,
    answered_with,
    outbound_id,
    redirect_body,
)
from streaming.ddr.config import RoutingServiceConfig
from streaming.ddr.store import create_mappings, forget, keep_mapping, mapping_of
from streaming.endpoint import Endpoint
from streaming.endpoint.endpoint import Dialog, Received
from streaming.endpoint.protocol import DESCRIPTION_MAX, END_DIALOG, ERROR, RETRY_FIRST_S
from streaming.endpoint.store import DialogClosed
from streaming.kafka.connection import Kafka
from streaming.observe.ddr_metrics import ROUTED, UNROUTED, DdrCollector, DdrFigures
from streaming.observe.server import DEFAULT_HOST, Health, MetricsServer, new_registry, serve
from streaming.observe.services import HEALTH_BOUND_S

log = logging.getLogger("streaming.ddr")

BATCH = 100
"""Messages taken, classified and answered in one transaction."""


class RoutingService:
    """A data-dependent routing service of one instance (see `streaming.ddr`).

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
                create_mappings(db)
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
                and mapping_of(db, m.dialog) is None
            ]
            targets = dict(zip((id(m) for m in firsts), self.classify(firsts), strict=True))
            for target in targets.values():
                self.figures.classified(ROUTED if target.service is not None else UNROUTED)
            for message in received:
                if message.is_timer:
                    continue
                mapping = mapping_of(db, message.dialog)
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
            forget(db, mapping)
        for side in sides:
            try:
                side.end_with_error(DIALOG_CLOSED, description)
            except DialogClosed:
                side.end()  # failed or ended already: it only ends here
        log.warning("%s: %s", here.conversation_id, description)
        return f"ended with an error: {description}"

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
                keep_mapping(db, Mapping(here.conversation_id, begun.conversation_id, service, broker))
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
                forget(db, mapping)
