"""Endpoints talking through a running router on the real broker (docs/rules.md §1.8, §1.15, §1.16).

Both services live in i1's AW database, so one router job (in a thread, on the session's Spark)
carries the dialogs both ways: AW's AutoCreatedLocal route delivers every message, reply and
acknowledgement into the other service's queue topic.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from streaming import topics
from streaming.config import load_settings
from streaming.endpoint import DialogClosed, Endpoint, Received
from streaming.endpoint.protocol import END_DIALOG, ERROR, LIFETIME_EXPIRED_CODE, RETRY_CAP_S, RETRY_FIRST_S
from streaming.errors import ConfigError
from streaming.kafka.avro import decode_message
from streaming.rules.model import DEFAULT_HOPS, Database, Instance, Route
from streaming.spark.job import RouterJob
from streaming.tables.topic_io import publish_catalogs, put_route
from tests.running import Running
from tests.topic_records import records_now

pytestmark = pytest.mark.integration

AW = Database("AW", "0a0a0a0a-0000-0000-0000-00000000000a", True, ("Client", "Server"))
MSDB = Database("msdb", "0d0d0d0d-0000-0000-0000-00000000000d", True, ())
I1 = Instance("i1", "TCP://i1:4022", (AW, MSDB), retry_s=2.0)


@pytest.fixture
def prefix(kafka_bootstrap: str) -> str:
    name = f"e{uuid.uuid4().hex[:10]}"
    publish_catalogs(kafka_bootstrap, [I1], topics.catalogs_topic(name))
    put_route(kafka_bootstrap, "i1", Route("AW", "AutoCreatedLocal", "LOCAL"), topics.routes_topic(name))
    return name


@pytest.fixture
def router(spark: SparkSession, kafka_bootstrap: str, prefix: str, tmp_path: Path) -> Iterator[RouterJob]:
    """i1's router, routing continuously until the test ends."""
    settings = load_settings(
        None,
        instance="i1",
        bootstrap=kafka_bootstrap,
        topic_prefix=prefix,
        checkpoint_dir=str(tmp_path / "router"),
        trigger_seconds=0.5,
    )
    job = RouterJob(spark, settings)
    running = Running()
    running.start(job.run, name="router-i1")
    try:
        yield job
    finally:
        running.stop_all()
        job.close()
    running.check()


def endpoint(
    kafka: str,
    prefix: str,
    tmp_path: Path,
    service: str,
    *,
    retry_first_s: float = RETRY_FIRST_S,
    retry_cap_s: float = RETRY_CAP_S,
    hops: int = DEFAULT_HOPS,
) -> Endpoint:
    return Endpoint(
        kafka,
        instance="i1",
        database="AW",
        service=service,
        store=tmp_path / f"{service}.db",
        prefix=prefix,
        retry_first_s=retry_first_s,
        retry_cap_s=retry_cap_s,
        hops=hops,
    )


def receive(
    ep: Endpoint, count: int, timeout_s: float = 90.0, *, pump: tuple[Endpoint, ...] = ()
) -> list[Received]:
    """`count` messages from `ep`, pumping the `pump` endpoints meanwhile (their acks, resends)."""
    deadline = time.monotonic() + timeout_s
    out: list[Received] = []
    while len(out) < count:
        assert time.monotonic() < deadline, f"received {len(out)} of {count} messages"
        out.extend(ep.receive(timeout_s=0.3, max_messages=count - len(out)))
        for other in pump:
            other.pump(0.05)
    return out


def settle(*endpoints: Endpoint, timeout_s: float = 90.0) -> None:
    """Pump until no endpoint holds a dialog or an unacked message."""
    deadline = time.monotonic() + timeout_s
    while any(ep.dialogs() or ep.unacknowledged() for ep in endpoints):
        assert time.monotonic() < deadline, [(len(ep.dialogs()), ep.unacknowledged()) for ep in endpoints]
        for ep in endpoints:
            ep.pump(0.1)


def test_a_dialog_is_acked_pinned_answered_and_forgotten_by_both_sides(
    router: RouterJob, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """A1, A2, CL2, CL3: messages arrive once and in order, acks pin the dialog, both ends end it."""
    with (
        # No resends within the test (a slow router round trip would bring one, and a resent
        # EndDialog is discarded once more): the counts below are those of one copy each.
        endpoint(kafka_bootstrap, prefix, tmp_path, "Client", retry_first_s=300, retry_cap_s=300) as client,
        endpoint(kafka_bootstrap, prefix, tmp_path, "Server", retry_first_s=300, retry_cap_s=300) as server,
    ):
        dialog = client.begin_dialog("Server", lifetime_s=600)
        assert [dialog.send(f"<n>{n}</n>".encode()) for n in range(5)] == [0, 1, 2, 3, 4]
        got = receive(server, 5, pump=(client,))
        assert [(m.sequence, m.body) for m in got] == [(n, f"<n>{n}</n>".encode()) for n in range(5)]
        assert client.wait_acknowledged(60)
        assert dialog.pinned and dialog.far_broker_instance == AW.broker_instance  # A2

        reply_on = got[0].dialog
        assert not reply_on.is_initiator and reply_on.conversation_id == dialog.conversation_id
        reply_on.send(b"<ok/>")
        (answer,) = receive(client, 1, pump=(server,))
        assert (answer.body, answer.dialog.conversation_id, answer.far_service) == (
            b"<ok/>",
            dialog.conversation_id,
            "Server",
        )

        dialog.end()
        (end,) = receive(server, 1, pump=(client,))
        assert end.is_end_dialog and end.message_type == END_DIALOG
        with pytest.raises(DialogClosed):
            end.dialog.send(b"<too-late/>")
        end.dialog.end()
        settle(client, server)  # both sides forgot the dialog: the stores do not grow (CL3)
        # The server took five and the EndDialog; the client took the reply, and discarded (after
        # acking it) the server's EndDialog, which answered its own (CL3).
        assert (client.counts.resent, server.counts.resent) == (0, 0)
        assert (server.counts.taken, client.counts.taken, client.counts.discarded) == (6, 1, 1)


def test_resends_reach_the_service_once_and_in_order(
    router: RouterJob, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """A3, A4: a sender that resends before acks can come back; the receiver drops the duplicates."""
    with (
        endpoint(kafka_bootstrap, prefix, tmp_path, "Client", retry_first_s=0.2, retry_cap_s=0.4) as client,
        endpoint(kafka_bootstrap, prefix, tmp_path, "Server") as server,
    ):
        dialogs = [client.begin_dialog("Server") for _ in range(3)]
        for n in range(4):
            for d in dialogs:
                d.send(f"{n}".encode())
        for _ in range(10):  # resend everything a few times before the server reads anything
            client.pump(0.1)
        assert client.counts.resent > 0
        got = receive(server, 12, pump=(client,))
        by_dialog: dict[str, list[bytes]] = {}
        for m in got:
            by_dialog.setdefault(m.dialog.conversation_id, []).append(m.body)
        assert by_dialog == {d.conversation_id: [b"0", b"1", b"2", b"3"] for d in dialogs}
        assert client.wait_acknowledged(60)
        # The resent copies reach the server's queue once the router has routed them: the same
        # micro-batch as the first copies, or a later one, after the server took all twelve.
        deadline = time.monotonic() + 60
        while server.counts.duplicates == 0 and time.monotonic() < deadline:
            server.pump(0.2)
        assert server.counts.duplicates > 0  # acked again, not queued twice (A4)
        assert server.receive(timeout_s=3) == []


def test_an_endpoint_that_died_before_sending_resends_after_a_restart(
    router: RouterJob, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """A3 across a restart: what was stored but never produced is sent when it falls due."""
    client = endpoint(kafka_bootstrap, prefix, tmp_path, "Client", retry_first_s=1.0)
    dialog = client.begin_dialog("Server")
    now = int(time.time() * 1000)
    for n in range(3):  # stored as sent, but the process "died" before producing them
        client.store.send(dialog.side, "DEFAULT", f"{n}".encode(), now, now + 1000)
    client.close()

    with (
        endpoint(kafka_bootstrap, prefix, tmp_path, "Client", retry_first_s=1.0) as again,
        endpoint(kafka_bootstrap, prefix, tmp_path, "Server") as server,
    ):
        assert again.unacknowledged() == 3
        got = receive(server, 3, pump=(again,))
        assert [m.body for m in got] == [b"0", b"1", b"2"]
        assert again.wait_acknowledged(60) and again.counts.resent >= 3


def test_a_dialog_whose_lifetime_passes_fails_on_both_sides(
    router: RouterJob, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """CL1, D4: each side gets a time-out Error and refuses further messages."""
    with (
        endpoint(kafka_bootstrap, prefix, tmp_path, "Client") as client,
        endpoint(kafka_bootstrap, prefix, tmp_path, "Server") as server,
    ):
        warm_up = client.begin_dialog("Server")  # the router's first batch compiles: let it pass
        warm_up.send(b"<warm-up/>")
        receive(server, 1, pump=(client,))
        dialog = client.begin_dialog("Server", lifetime_s=10)
        dialog.send(b"<first/>")
        (first,) = receive(server, 1, pump=(client,))
        assert first.body == b"<first/>"
        (server_timeout,) = receive(server, 1, timeout_s=60, pump=(client,))
        (client_timeout,) = receive(client, 1, timeout_s=60)
        for timeout in (server_timeout, client_timeout):
            assert timeout.is_error and timeout.error is not None
            assert timeout.error.code == LIFETIME_EXPIRED_CODE and "lifetime" in timeout.error.description
        with pytest.raises(DialogClosed, match="lifetime"):
            dialog.send(b"<late/>")
        dialog.end()
        server_timeout.dialog.end()
        timed_out = dialog.conversation_id  # both sides forgot it
        assert client.dialog(timed_out, True) is None and server.dialog(timed_out, False) is None


def test_an_error_ends_the_dialog_on_the_far_side_too(
    router: RouterJob, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """CL3: END CONVERSATION WITH ERROR; the far side receives the Error and cannot send after it."""
    with (
        endpoint(kafka_bootstrap, prefix, tmp_path, "Client") as client,
        endpoint(kafka_bootstrap, prefix, tmp_path, "Server") as server,
    ):
        dialog = client.begin_dialog("Server")
        dialog.send(b"<order/>")
        (order,) = receive(server, 1, pump=(client,))
        order.dialog.end_with_error(50, "no such part")
        (error,) = receive(client, 1, pump=(server,))
        assert error.message_type == ERROR and error.error is not None
        assert (error.error.code, error.error.description) == (50, "no such part")
        with pytest.raises(DialogClosed, match="no such part"):
            dialog.send(b"<more/>")
        dialog.end()
        settle(client, server)


def test_a_dialog_timer_fires_on_its_own_side_and_is_never_sent(
    router: RouterJob, kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """CL4, §1.15: DialogTimer never leaves the endpoint that set it."""
    with endpoint(kafka_bootstrap, prefix, tmp_path, "Client") as client:
        dialog = client.begin_dialog("Server")
        dialog.begin_timer(0.5)
        (timer,) = receive(client, 1, timeout_s=10)
        assert timer.is_timer and timer.dialog.conversation_id == dialog.conversation_id
        assert client.counts.sent == 0


def test_every_message_an_endpoint_writes_carries_its_hop_budget(
    kafka_bootstrap: str, prefix: str, tmp_path: Path
) -> None:
    """F3: an endpoint gives what it writes the hop budget it was given (`hops`), 16 by default;
    a budget a tinyint cannot hold is refused before anything is written."""
    with endpoint(kafka_bootstrap, prefix, tmp_path, "Client", hops=3) as client:
        client.begin_dialog("Server").send(b"<three/>")
    with endpoint(kafka_bootstrap, prefix, tmp_path, "Server") as server:
        server.begin_dialog("Client").send(b"<default/>")
    outbound = records_now(kafka_bootstrap, topics.outbound_topic("i1", prefix))
    written = sorted(
        (m["from_service"], m["hops_remaining"]) for m in map(decode_message, (r.value() for r in outbound))
    )
    assert written == [("Client", 3), ("Server", 16)]
    for hops in (-1, 256):
        with pytest.raises(ConfigError, match=f"from 0 to 255, got {hops}"):
            endpoint(kafka_bootstrap, prefix, tmp_path / "refused", "Client", hops=hops)
