"""The dialog protocol's decisions and the endpoint's store, no Kafka (docs/rules.md §1.8, §1.15, §1.16)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.endpoint.protocol import (
    ACKNOWLEDGEMENT,
    DIALOG_TIMER,
    END_DIALOG,
    ENDED_MEMORY_S,
    ERROR,
    LIFETIME_EXPIRED_CODE,
    RETRY_CAP_S,
    RETRY_FIRST_S,
    Arrival,
    ack_body,
    acked_through,
    arrival,
    check_application_error,
    error_body,
    parse_error_body,
    retry_wait_s,
    starts_dialog,
)
from streaming.endpoint.store import (
    DialogClosed,
    DialogStore,
    Incoming,
    Pending,
    StoreInUse,
    store_holder,
    wait_for_store,
)

A_BID = "0a0a0a0a-0000-0000-0000-000000000001"
B_BID = "0b0b0b0b-0000-0000-0000-000000000002"


def test_resends_wait_a_few_seconds_then_twice_as_long_up_to_about_a_minute() -> None:
    """A3: first wait "a few seconds", exponential, capped at about one minute."""
    waits = [retry_wait_s(n) for n in range(8)]
    assert waits[:4] == [RETRY_FIRST_S * 2**n for n in range(4)]
    assert max(waits) == RETRY_CAP_S == 60.0
    assert waits == sorted(waits)
    assert retry_wait_s(3, first_s=0.5, cap_s=2.0) == 2.0
    with pytest.raises(ValueError):
        retry_wait_s(-1)


@pytest.mark.parametrize(
    ("expected", "sequence", "closed", "fate"),
    [
        (3, 3, False, Arrival.TAKE),
        (3, 1, False, Arrival.DUPLICATE),  # A4: acked again, not queued twice
        (3, 5, False, Arrival.EARLY),  # left unacked: the sender resends 3, 4, 5 in order
        (3, 3, True, Arrival.DISCARD),  # CL3: the dialog ended here; acked so the sender stops
        (3, 2, True, Arrival.DUPLICATE),
        (3, 4, True, Arrival.EARLY),
    ],
)
def test_a_sequenced_message_is_taken_only_in_order(
    expected: int, sequence: int, closed: bool, fate: Arrival
) -> None:
    assert arrival(expected, sequence, closed=closed) is fate


def test_only_the_initiators_first_message_opens_a_target_side() -> None:
    """CL2: the target endpoint is created when the first message arrives."""
    assert starts_dialog(0, from_initiator=True)
    assert not starts_dialog(1, from_initiator=True)
    assert not starts_dialog(0, from_initiator=False)


def test_ack_and_error_bodies_read_back() -> None:
    assert acked_through(ack_body(41)) == 41
    with pytest.raises(ValueError):
        acked_through(b"<x/>")
    body = error_body(7, "out of <stock> & gone")
    assert parse_error_body(body).code == 7
    assert parse_error_body(body).description == "out of <stock> & gone"
    assert b"http://schemas.microsoft.com/SQL/ServiceBroker" in body
    with pytest.raises(ValueError):
        parse_error_body(b"not xml")


def test_an_application_error_has_a_positive_code_and_a_description() -> None:
    """§1.15: application failure codes are > 0; the description is nvarchar(3000)."""
    check_application_error(1, "x")
    for code, text in ((0, "x"), (-5, "x"), (1, ""), (1, "x" * 3001)):
        with pytest.raises(ValueError):
            check_application_error(code, text)


# --- the store --------------------------------------------------------------------------------


def incoming(
    conversation: str,
    sequence: int,
    *,
    from_initiator: bool = True,
    message_type: str = "DEFAULT",
    body: bytes = b"<x/>",
    bid: str | None = A_BID,
    expires_ms: int | None = None,
) -> Incoming:
    return Incoming(conversation, sequence, from_initiator, "Client", bid, message_type, body, expires_ms)


def ack(conversation: str, through: int, *, from_initiator: bool = False, bid: str = B_BID) -> Incoming:
    return Incoming(conversation, -1, from_initiator, "Server", bid, ACKNOWLEDGEMENT, ack_body(through), None)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[DialogStore]:
    s = DialogStore(tmp_path / "endpoint.db")
    yield s
    s.close()


def test_the_target_takes_in_order_acks_duplicates_again_and_leaves_early_ones(store: DialogStore) -> None:
    acks, counts = store.arrive([incoming("c", 0), incoming("c", 1), incoming("c", 1), incoming("c", 3)], 0)
    assert (counts.taken, counts.duplicates, counts.early) == (2, 1, 1)
    assert [
        (a.conversation_id, a.initiator, a.through, a.to_service, a.to_broker_instance) for a in acks
    ] == [("c", False, 1, "Client", A_BID)]
    assert [q.sequence for q in store.take(10)] == [0, 1]
    assert store.take(10) == []  # handed over once
    row = store.dialog(("c", False))
    assert row is not None and row.next_take == 2 and row.far_broker_instance == A_BID and row.pinned


def test_a_message_of_an_unknown_dialog_opens_it_only_if_it_is_the_first(store: DialogStore) -> None:
    acks, counts = store.arrive([incoming("c", 1)], 0)
    assert acks == [] and counts.early == 1 and store.dialog(("c", False)) is None
    _, counts = store.arrive([incoming("d", 0, from_initiator=False)], 0)  # a reply to nothing held here
    assert counts.early == 1 and store.dialogs() == []


def test_the_first_ack_pins_the_dialog_and_frees_what_it_covers(store: DialogStore) -> None:
    """A2, A3."""
    store.begin("c", "Server", None, None)
    for _ in range(3):
        store.send(("c", True), "DEFAULT", b"m", 0, 1000)
    assert store.unacknowledged() == 3
    assert store.acknowledged([ack("c", 1)], 10) == 2
    row = store.dialog(("c", True))
    assert row is not None and row.pinned and row.far_broker_instance == B_BID
    assert store.unacknowledged() == 1
    assert store.acknowledged([ack("c", 2, bid="0c0c0c0c-0000-0000-0000-000000000003")], 10) == 1
    row = store.dialog(("c", True))
    assert row is not None and row.far_broker_instance == B_BID  # pinned once, not moved


def test_what_is_unacked_falls_due_in_dialog_order(store: DialogStore) -> None:
    store.begin("c", "Server", None, None)
    store.send(("c", True), "DEFAULT", b"0", 0, 500)
    store.send(("c", True), "DEFAULT", b"1", 0, 400)
    assert store.due(399) == []
    assert [p.sequence for p in store.due(500)] == [0, 1]
    store.resent([(p, 5000) for p in store.due(500)])
    assert store.due(4999) == [] and [p.resends for p in store.due(5000)] == [1, 1]


def test_both_sides_ending_removes_the_dialog_and_late_duplicates_are_discarded(store: DialogStore) -> None:
    """CL3: the initiator ends; the target takes the EndDialog and answers; both forget."""
    store.begin("c", "Server", None, None)
    store.send(("c", True), "DEFAULT", b"m", 0, 1000)
    store.send(("c", True), END_DIALOG, b"", 0, 1000)
    with pytest.raises(DialogClosed):
        store.send(("c", True), "DEFAULT", b"late", 0, 1000)
    store.acknowledged([ack("c", 1)], 10)
    assert store.dialog(("c", True)) is not None  # the far side has not ended yet
    acks, counts = store.arrive(
        [incoming("c", 0, from_initiator=False, message_type=END_DIALOG, bid=B_BID)], 20
    )
    assert counts.discarded == 1 and [a.through for a in acks] == [0]  # acked, not shown: this side ended
    assert store.dialogs() == [] and store.unacknowledged() == 0
    acks, counts = store.arrive([incoming("c", 0, from_initiator=False, bid=B_BID)], 30)
    assert counts.discarded == 1 and len(acks) == 1 and store.dialogs() == []  # remembered as ended
    store.forget_ended(30 + int(ENDED_MEMORY_S * 1000))
    _, counts = store.arrive([incoming("c", 0, from_initiator=False, bid=B_BID)], 40)
    assert counts.early == 1  # forgotten: not a new dialog either (not the initiator's first)


def test_the_target_sees_the_end_dialog_and_answers_it(store: DialogStore) -> None:
    store.arrive([incoming("c", 0), incoming("c", 1, message_type=END_DIALOG)], 0)
    assert [q.message_type for q in store.take(10)] == ["DEFAULT", END_DIALOG]
    with pytest.raises(DialogClosed):
        store.send(("c", False), "DEFAULT", b"reply", 0, 1000)
    store.send(("c", False), END_DIALOG, b"", 0, 1000)  # CL2: both sides end it
    assert store.dialog(("c", False)) is not None  # until its EndDialog is acked
    store.acknowledged([ack("c", 0, from_initiator=True, bid=A_BID)], 10)
    assert store.dialogs() == []


def test_an_error_drops_what_is_unacked_on_both_sides(store: DialogStore) -> None:
    """CL3: END CONVERSATION WITH ERROR drops the unsent messages; SEND fails after an Error arrives."""
    store.begin("c", "Server", None, None)
    for _ in range(3):
        store.send(("c", True), "DEFAULT", b"m", 0, 1000)
    store.end_with_error(("c", True), 0, 1000, error_body(50, "cancelled"))
    assert [p.message_type for p in store.due(1000)] == [ERROR]
    store.acknowledged([ack("c", 3)], 10)
    assert store.dialogs() == []

    store.arrive([incoming("t", 0)], 0)
    store.send(("t", False), "DEFAULT", b"reply", 0, 1000)
    store.arrive([incoming("t", 1, message_type=ERROR, body=error_body(50, "cancelled"))], 0)
    assert store.unacknowledged() == 0
    error = store.take(10)[0]  # received before the dialog's other messages (§1.15)
    assert error.message_type == ERROR and parse_error_body(error.body).code == 50
    with pytest.raises(DialogClosed, match="error 50: cancelled"):
        store.send(("t", False), "DEFAULT", b"more", 0, 1000)
    assert store.end_locally(("t", False), 20)
    assert store.dialogs() == []


def test_a_lifetime_that_passes_fails_the_dialog_with_a_time_out_error(store: DialogStore) -> None:
    """CL1, D4: each side queues a time-out Error and refuses further messages."""
    store.begin("c", "Server", None, 5_000)
    store.send(("c", True), "DEFAULT", b"m", 0, 1000)
    assert store.expire(4_999) == 0
    assert store.expire(5_000) == 1
    assert store.unacknowledged() == 0
    timeout = store.take(10)
    assert [(q.message_type, parse_error_body(q.body).code) for q in timeout] == [
        (ERROR, LIFETIME_EXPIRED_CODE)
    ]
    with pytest.raises(DialogClosed, match="lifetime"):
        store.send(("c", True), "DEFAULT", b"m", 6_000, 7_000)
    assert store.expire(6_000) == 0  # once
    store.end_locally(("c", True), 6_000)
    assert store.dialogs() == []


def test_a_timer_queues_a_dialog_timer_here(store: DialogStore) -> None:
    """CL4: the DialogTimer is put on the side that set it, and never sent."""
    store.begin("c", "Server", None, None)
    store.set_timer(("c", True), 1_000)
    store.set_timer(("c", True), 2_000)  # replaces the first
    assert store.fire_timers(1_500) == 0
    assert store.fire_timers(2_000) == 1
    assert [q.message_type for q in store.take(10)] == [DIALOG_TIMER]
    assert store.unacknowledged() == 0


def test_the_store_survives_a_reopen(tmp_path: Path) -> None:
    first = DialogStore(tmp_path / "e.db")
    first.begin("c", "Server", None, None)
    first.send(("c", True), "DEFAULT", b"m", 0, 1000)
    first.arrive([incoming("t", 0)], 0)
    first.close()
    again = DialogStore(tmp_path / "e.db")
    assert again.unacknowledged() == 1 and again.queued() == 1 and len(again.dialogs()) == 2
    again.close()


def test_a_timer_then_an_error_are_received_before_the_other_messages(store: DialogStore) -> None:
    """§1.15: DialogTimer before any other message; Error before any other but DialogTimer."""
    store.arrive([incoming("c", 0), incoming("c", 1)], 0)
    store.set_timer(("c", False), 10)
    store.arrive([incoming("c", 2, message_type=ERROR, body=error_body(3, "stop"))], 5)
    store.fire_timers(10)
    assert [(q.message_type, q.sequence) for q in store.take(2)] == [(DIALOG_TIMER, -1), (ERROR, 2)]
    assert [q.sequence for q in store.take(10)] == [0, 1]


# --- the protocol over a channel that loses, repeats and reorders ------------------------------

_ACTIONS = st.lists(
    st.tuples(
        st.sampled_from(["send", "resend", "deliver", "repeat", "lose", "ack", "take"]), st.integers(0, 50)
    ),
    max_size=80,
)


@settings(max_examples=150, deadline=None)
@given(actions=_ACTIONS, count=st.integers(1, 8))
def test_over_any_channel_the_service_takes_each_message_once_and_in_order(
    tmp_path_factory: pytest.TempPathFactory, actions: list[tuple[str, int]], count: int
) -> None:
    """A1-A4 together: whatever a channel loses, repeats or reorders, resends until acked give the
    receiving service every message once, in sequence order, and leave the sender nothing unacked."""
    folder = tmp_path_factory.mktemp("channel")
    sender, receiver = DialogStore(folder / "sender.db"), DialogStore(folder / "receiver.db")
    try:
        sender.begin("c", "Server", None, None)
        to_receiver: list[Incoming] = []
        to_sender: list[Incoming] = []
        taken: list[bytes] = []
        sent = 0
        now = 0

        def packet(p: Pending) -> Incoming:
            return Incoming(
                p.conversation_id, p.sequence, True, "Client", A_BID, p.message_type, p.body, None
            )

        def resend() -> None:
            due = sender.due(now)
            to_receiver.extend(packet(p) for p in due)
            sender.resent([(p, now + 1) for p in due])

        def deliver(index: int, *, keep: bool = False) -> None:
            message = to_receiver[index] if keep else to_receiver.pop(index)
            acks, _ = receiver.arrive([message], now)
            to_sender.extend(
                Incoming(
                    a.conversation_id,
                    -1,
                    a.initiator,
                    "Server",
                    B_BID,
                    ACKNOWLEDGEMENT,
                    ack_body(a.through),
                    None,
                )
                for a in acks
            )

        for action, n in actions:
            now += 1
            if action == "send" and sent < count:
                body = str(sent).encode()
                _, sequence = sender.send(("c", True), "DEFAULT", body, now, now + 1)
                to_receiver.append(packet(Pending("c", True, sequence, "DEFAULT", body, now, 0)))
                sent += 1
            elif action == "resend":
                resend()
            elif action in ("deliver", "repeat") and to_receiver:
                deliver(n % len(to_receiver), keep=action == "repeat")
            elif action == "lose" and to_receiver:
                to_receiver.pop(n % len(to_receiver))
            elif action == "ack" and to_sender:
                sender.acknowledged([to_sender.pop(n % len(to_sender))], now)
            elif action == "take":
                taken += [q.body for q in receiver.take(n % 4 + 1)]
        while sent < count:  # the service sends the rest
            now += 1
            _, sequence = sender.send(("c", True), "DEFAULT", str(sent).encode(), now, now + 1)
            sent += 1
        for _ in range(4 * count + 10):  # then the channel behaves: resend, deliver, ack, in order
            if not sender.unacknowledged():
                break
            now += 2
            resend()
            while to_receiver:
                deliver(0)
            sender.acknowledged(to_sender, now)
            to_sender.clear()
        taken += [q.body for q in receiver.take(100)]
        assert sender.unacknowledged() == 0
        assert taken == [str(n).encode() for n in range(count)]
    finally:
        sender.close()
        receiver.close()


def test_one_process_serves_a_store_and_a_standby_waits_until_it_stops(tmp_path: Path) -> None:
    """A second process on a held store is refused with the holder's pid; a standby's wait ends
    when the holder dies (killed: the kernel drops its lock), and then it opens the store."""
    path = tmp_path / "shared.db"
    assert store_holder(path) is None
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from streaming.endpoint.store import DialogStore;"
            f" s = DialogStore({str(path)!r}); print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        assert store_holder(path) == holder.pid
        with pytest.raises(StoreInUse, match=rf"in use by process {holder.pid}.*standby"):
            DialogStore(path)
        stop = threading.Event()
        stop.set()
        assert wait_for_store(path, stop, poll_s=0.01) is False, "a stopped standby gives up"
        stop.clear()
        waited: list[bool] = []
        standby = threading.Thread(target=lambda: waited.append(wait_for_store(path, stop, poll_s=0.05)))
        standby.start()
        standby.join(0.5)
        assert standby.is_alive(), "the standby waits while the holder lives"
        holder.kill()
        holder.wait()
        standby.join(10)
        assert waited == [True]
    finally:
        holder.kill()
        holder.wait()
    taken = DialogStore(path)
    assert store_holder(path) == os.getpid()
    taken.close()
    assert store_holder(path) is None
