"""Conversations across instances on the real broker: endpoints at both ends, a forwarder between.

A's Client talks to B's Server through forwarder F (`chain.py`). One `router run` routes A and B in
one query (`instances: [A, B]`), another routes F; F's is killed with SIGKILL while messages flow.
The endpoints ack, resend and drop duplicates (A1-A4), so every message reaches the service once
and in order however often the forwarder repeats or loses its work (F4: a forwarder stores nothing).
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import pytest
from chain import (
    CHAIN_ROUTES,
    LOOP_ROUTES,
    STOCK,
    A,
    B,
    F,
    G,
    client,
    new_chain,
    server,
    settings_file,
    start_sender,
)
from processes import kill, records_with_headers, start_router, stop, wait_for

from streaming import topics
from streaming.endpoint import Endpoint, Received
from streaming.endpoint.protocol import LIFETIME_EXPIRED_CODE
from streaming.kafka.avro import Record, decode_message
from streaming.rules.model import Instance, Route

pytestmark = [pytest.mark.e2e, pytest.mark.fault]

DIALOGS = 1000
MESSAGES = 10  # per dialog: 10,000 in all


def wait_until_routing(process: subprocess.Popen[bytes], log: Path) -> None:
    """Until the router says it routes (its query started), or fail with its log."""
    wait_for(
        lambda: "routing instance" in log.read_text(errors="replace"), 240, "the query's start", process, log
    )


def route_together(
    bootstrap: str,
    label: str,
    instances: tuple[Instance, ...],
    routes: dict[str, tuple[Route, ...]],
    tmp_path: Path,
    started: list[subprocess.Popen[bytes]],
) -> tuple[str, subprocess.Popen[bytes], Path]:
    """A fresh prefix with the instances' catalogs and routes, and one `router run` for them all.

    Returns the prefix, the router (started, its query running) and its log.
    """
    prefix = new_chain(bootstrap, label, instances, routes)
    names = [i.name for i in instances]
    settings = settings_file(tmp_path / "all.yaml", bootstrap, prefix, names, tmp_path / "all")
    log = tmp_path / "router.log"
    router = start_router(settings, log, started)
    wait_until_routing(router, log)
    return prefix, router, log


class Service:
    """B's Server as a service: it keeps every message body it takes, per dialog, in order."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self.taken: dict[str, list[bytes]] = defaultdict(list)

    def serve(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for message in self.endpoint.receive(timeout_s=0.2, max_messages=2000):
                self.taken[message.dialog.conversation_id].append(message.body)

    @property
    def count(self) -> int:
        return sum(len(bodies) for bodies in self.taken.values())


def pump_until(condition: Callable[[], object], what: str, timeout_s: float, *parties: object) -> None:
    """Let the endpoints work until `condition()` holds (Service.serve or Endpoint.pump)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            state = [
                f"service took {p.count}"
                if isinstance(p, Service)
                else f"endpoint awaits {p.unacknowledged()} acks"
                for p in parties
                if isinstance(p, (Service, Endpoint))
            ]
            raise AssertionError(f"not within {timeout_s} s: {what} ({'; '.join(state)})")
        for party in parties:
            if isinstance(party, Service):
                party.serve(0.3)
            else:
                assert isinstance(party, Endpoint)
                party.pump(0.1)


def test_a_to_b_through_a_forwarder_killed_twice_delivers_each_message_once_in_order(
    kafka_bootstrap: str, started: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    prefix = new_chain(kafka_bootstrap, "chain", (A, F, B), CHAIN_ROUTES)
    ab_settings = settings_file(tmp_path / "ab.yaml", kafka_bootstrap, prefix, ["A", "B"], tmp_path / "ab")
    f_settings = settings_file(tmp_path / "f.yaml", kafka_bootstrap, prefix, ["F"], tmp_path / "f")
    ab_log, f_log = tmp_path / "ab.log", tmp_path / "f.log"
    ab = start_router(ab_settings, ab_log, started)
    forwarder = start_router(f_settings, f_log, started)
    wait_until_routing(ab, ab_log)
    wait_until_routing(forwarder, f_log)

    with (
        client(
            kafka_bootstrap, prefix, tmp_path / "client.db", retry_first_s=15.0, retry_cap_s=60.0
        ) as sender,
        server(kafka_bootstrap, prefix, tmp_path / "server.db") as receiver,
    ):
        service = Service(receiver)
        dialogs = [sender.begin_dialog("Server", lifetime_s=3600) for _ in range(DIALOGS)]
        half = MESSAGES // 2

        def send(numbers: range) -> None:
            for n in numbers:
                for dialog in dialogs:
                    dialog.send(f"{dialog.conversation_id}:{n}".encode())

        # First half: F is killed while it forwards them, and started again from its checkpoint.
        send(range(half))
        pump_until(
            lambda: service.count >= DIALOGS, "the first thousand messages reach B", 300, sender, service
        )
        kill(forwarder)
        forwarder = start_router(f_settings, f_log, started)
        pump_until(
            lambda: service.count == DIALOGS * half and sender.unacknowledged() == 0,
            "the first half reaches B and is acked",
            600,
            sender,
            service,
        )
        # A2: each dialog is pinned to B's database by its first ack.
        assert all(d.pinned and d.far_broker_instance == STOCK.broker_instance for d in dialogs)

        # Second half, pinned: F is killed again while it forwards them.
        send(range(half, MESSAGES))
        pump_until(
            lambda: service.count >= DIALOGS * (half + 1),
            "the second half starts to arrive",
            300,
            sender,
            service,
        )
        kill(forwarder)
        forwarder = start_router(f_settings, f_log, started)
        pump_until(
            lambda: service.count == DIALOGS * MESSAGES and sender.unacknowledged() == 0,
            "every message reaches B and is acked",
            900,
            sender,
            service,
        )
        service.serve(3)  # nothing more comes: no message is taken twice

        # Exactly once and in order, per dialog (A4), whatever F repeated after its kills.
        assert service.count == DIALOGS * MESSAGES
        assert {cid: bodies for cid, bodies in service.taken.items()} == {
            d.conversation_id: [f"{d.conversation_id}:{n}".encode() for n in range(MESSAGES)] for d in dialogs
        }
        assert sender.unacknowledged() == 0
        sent, resent, dropped = sender.counts.sent, sender.counts.resent, receiver.counts.duplicates
        print(f"chain: A sent {sent} and resent {resent}; B dropped {dropped} duplicates")

    # Every message of the second half reached B naming B's database (the pin, A2); every ack A
    # received came from B's database: the forwarder acked nothing (A8, F4).
    arrived = _records(kafka_bootstrap, topics.queue_topic("B", "Stock", "Server", prefix))
    assert len(arrived) >= DIALOGS * MESSAGES
    later = [r for r in arrived if r["sequence_number"] >= half]
    assert later and all(r["to_broker_instance"] == STOCK.broker_instance for r in later)
    acks = _records(kafka_bootstrap, topics.queue_topic("A", "Sales", "Client", prefix))
    assert acks and {r["from_broker_instance"] for r in acks} == {STOCK.broker_instance}
    for process, log in ((ab, ab_log), (forwarder, f_log)):
        assert "Traceback" not in stop(process, log, signal.SIGINT)


def test_a_killed_endpoint_resends_what_was_not_acked_and_the_receiver_drops_the_duplicates(
    kafka_bootstrap: str, started: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    """A3 across a crash: A's endpoint is SIGKILLed after sending, before any ack came back."""
    prefix, router, log = route_together(
        kafka_bootstrap, "resend", (A, F, B), CHAIN_ROUTES, tmp_path, started
    )

    store = tmp_path / "client.db"
    sender_log = tmp_path / "sender.log"
    sender = start_sender(kafka_bootstrap, prefix, store, dialogs=50, messages=4, log=sender_log)
    deadline = time.monotonic() + 120
    while "sent" not in sender_log.read_text(errors="replace"):
        assert sender.poll() is None and time.monotonic() < deadline, sender_log.read_text()[-3000:]
        time.sleep(0.2)
    kill(sender)  # B's endpoint has not started: nothing was acked

    with server(kafka_bootstrap, prefix, tmp_path / "server.db") as receiver:
        service = Service(receiver)
        with client(kafka_bootstrap, prefix, store, retry_first_s=5.0, retry_cap_s=10.0) as again:
            assert again.unacknowledged() == 200  # the store kept them through the kill
            pump_until(
                lambda: service.count == 200 and again.unacknowledged() == 0,
                "B takes all 200 and A's restarted endpoint sees them acked",
                300,
                again,
                service,
            )
            assert again.counts.resent >= 200  # it resent what it had sent before the kill
        service.serve(5)
        assert service.count == 200
        assert all(
            bodies == sorted(bodies, key=lambda b: int(b.split(b":")[1])) for bodies in service.taken.values()
        )
        assert receiver.counts.duplicates >= 200  # the copies sent before the kill and resent after it
    assert "Traceback" not in stop(router, log, signal.SIGINT)


def test_two_forwarders_that_point_at_each_other_discard_the_message_and_the_sender_times_out(
    kafka_bootstrap: str, started: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    """LP1, LP3, F3: the loop ends when the hops are spent; the sender gives up at the lifetime."""
    prefix, router, log = route_together(kafka_bootstrap, "loop", (A, F, G), LOOP_ROUTES, tmp_path, started)

    # No resend before the lifetime passes: the one copy loops until its hops are spent. Three hops
    # (A's router sends it to F, which forwards it to G, G to F and F to G, which discards it) take
    # five micro-batches; the lifetime leaves them 12 s each on a loaded machine, so the hops run out
    # first (16 hops, the default, would take 17 micro-batches and a lifetime three times as long).
    with client(
        kafka_bootstrap, prefix, tmp_path / "client.db", retry_first_s=300.0, retry_cap_s=300.0, hops=3
    ) as sender:
        dialog = sender.begin_dialog("Server", lifetime_s=60)
        dialog.send(b"<lost/>")
        got: list[Received] = []
        deadline = time.monotonic() + 300
        while not got:
            assert time.monotonic() < deadline, "the sender did not time out"
            got = sender.receive(timeout_s=1)
        (timeout,) = got
        assert timeout.is_error and timeout.error is not None and timeout.error.code == LIFETIME_EXPIRED_CODE
        assert sender.unacknowledged() == 0  # never acked (LP3), dropped at the time-out
        dialog.end()
        assert sender.dialogs() == []
    # F3: each forward cost one hop; the copy whose hops were spent was discarded with the reason.
    loop_ends = [topics.dropped_topic(name, prefix) for name in ("F", "G")]
    wait_for(
        lambda: any(records_with_headers(kafka_bootstrap, topic) for topic in loop_ends),
        120,
        "the loop's end on a dropped topic",
        router,
        log,
    )
    assert "Traceback" not in stop(router, log, signal.SIGINT)
    dropped = []
    for name in ("F", "G"):
        for headers, value in records_with_headers(kafka_bootstrap, topics.dropped_topic(name, prefix)):
            dropped.append(
                (name, headers.get("outcome"), headers.get("reason"), decode_message(value)["hops_remaining"])
            )
    assert dropped and all(
        outcome == "discarded" and reason == "hops_exhausted" and hops == 0
        for _, outcome, reason, hops in dropped
    )


def _records(bootstrap: str, topic: str) -> list[Record]:
    return [decode_message(value) for _, value in records_with_headers(bootstrap, topic)]
