"""Mirror failover under a running router: traffic follows the partner that claims the principal role.

i1's AW database reaches the Stock service by a database-mirroring route whose partners are p1
(ADDRESS) and p2 (MIRROR_ADDRESS). The partners' roles are written with `router mirrors set`, as a
partner (or its monitor) would publish them, while `router run` routes (docs/rules.md §1.13, MI1-MI3).
"""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from confluent_kafka import Producer
from processes import ROOT, new_namespace, read_outcome, records_with_headers, start_router, stop, wait_for

from streaming import topics
from streaming.kafka.avro import encode_message, new_message_record
from streaming.rules.model import Database, Instance, Route, normalize_address

pytestmark = pytest.mark.e2e

AW = Database("AW", "0a0a0a0a-0000-0000-0000-000000000001", True, ("InitiatorService",))
I1 = Instance("i1", "TCP://i1:4022", (AW,), retry_s=1.0)
P1, P2 = "TCP://p1:4022", "TCP://p2:4022"
MIRRORED = Route("AW", "StockRoute", P1, service="Stock", mirror_address=P2)


def partner_topic(address: str, prefix: str) -> str:
    return topics.network_topic(normalize_address(address), prefix)


def mirrors_set(bootstrap: str, prefix: str, address: str, role: str) -> None:
    """`router mirrors set ADDRESS ROLE`, as a user runs it."""
    common = ["--bootstrap", bootstrap, "--topic-prefix", prefix]
    done = subprocess.run(
        [sys.executable, "-m", "streaming.cli", "mirrors", "set", address, role, *common],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"{address}: {role}" in done.stdout


def send(bootstrap: str, prefix: str, ids: list[str]) -> None:
    """One message to Stock per id, each on its own conversation."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for message_id in ids:
        record = new_message_record(
            message_id=message_id,
            conversation_id=f"conversation-{message_id}",
            to_service="Stock",
            from_service="InitiatorService",
            origin_database="AW",
            enqueued_at=datetime.now(timezone.utc),
            body=b"<reorder/>",
        )
        producer.produce(
            topics.outbound_topic("i1", prefix),
            key=record["conversation_id"].encode(),
            value=encode_message(record),
        )
    assert producer.flush(30) == 0


def routing_with_roles(router: subprocess.Popen[bytes], log: Path, records: int) -> None:
    """Until a micro-batch's line says its snapshot holds the mirrors topic's first `records` records."""
    marker = f"mirrors@p0:{records} "
    wait_for(lambda: marker in log.read_text(errors="replace"), 120, f"a batch with {marker}", router, log)


def arrived(bootstrap: str, prefix: str, ids: list[str], address: str, timeout_s: float = 120) -> None:
    """Wait until every id was written to `address`'s topic; fail if any reached the other partner."""
    names = [partner_topic(P1, prefix), partner_topic(P2, prefix)]
    deadline = time.monotonic() + timeout_s
    while True:
        outcome = read_outcome(bootstrap, names)
        here = outcome.ids(partner_topic(address, prefix))
        elsewhere = set(outcome.ids(*[n for n in names if n != partner_topic(address, prefix)]))
        assert not elsewhere & set(ids), (
            f"sent to the partner that is not principal: {sorted(elsewhere & set(ids))}"
        )
        if set(ids) <= set(here):
            return
        assert time.monotonic() < deadline, f"{len(set(ids) & set(here))} of {len(ids)} reached {address}"
        time.sleep(0.5)


def test_traffic_follows_the_principal_and_waits_while_no_partner_claims_it(
    kafka_bootstrap: str, started: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    prefix = new_namespace(
        kafka_bootstrap, "mirror", I1, (MIRRORED,), lambda p: [partner_topic(P1, p), partner_topic(P2, p)]
    )
    mirrors_set(kafka_bootstrap, prefix, P1, "principal")
    mirrors_set(kafka_bootstrap, prefix, P2, "mirror")
    settings = tmp_path / "i1.yaml"
    settings.write_text(
        f"instance: i1\nbootstrap: {kafka_bootstrap}\ntopic_prefix: {prefix}\n"
        f"checkpoint_dir: {tmp_path / 'checkpoint'}\ntrigger_seconds: 0.5\n",
        encoding="utf-8",
    )
    log = tmp_path / "router.log"
    router = start_router(settings, log, started)

    # MI2: everything on the mirror route goes to the partner that says it is the principal.
    first = [f"a{n}" for n in range(10)]
    send(kafka_bootstrap, prefix, first)
    arrived(kafka_bootstrap, prefix, first, P1, timeout_s=240)

    # Failover: p2 claims the role, p1 steps down. New messages go to p2.
    mirrors_set(kafka_bootstrap, prefix, P1, "mirror")
    mirrors_set(kafka_bootstrap, prefix, P2, "principal")
    routing_with_roles(router, log, 4)  # the roles are read before each micro-batch
    second = [f"b{n}" for n in range(10)]
    send(kafka_bootstrap, prefix, second)
    arrived(kafka_bootstrap, prefix, second, P2)

    # MI3: p2 is unreachable and p1 does not claim the role: no partner is chosen, the messages wait.
    mirrors_set(kafka_bootstrap, prefix, P2, "unreachable")
    routing_with_roles(router, log, 5)
    third = [f"c{n}" for n in range(10)]
    send(kafka_bootstrap, prefix, third)
    delayed = topics.delayed_topic("i1", prefix)
    wait_for(
        lambda: set(third) <= set(read_outcome(kafka_bootstrap, [delayed]).ids(delayed)),
        120,
        "the messages without a principal delayed",
        router,
        log,
    )
    names = [partner_topic(P1, prefix), partner_topic(P2, prefix)]
    assert not set(third) & set(read_outcome(kafka_bootstrap, names).ids(*names))
    reasons = {headers.get("reason") for headers, _ in records_with_headers(kafka_bootstrap, delayed)}
    assert reasons == {"principal_unknown"}

    # p1 claims the role again: the waiting messages are released to it when they fall due.
    mirrors_set(kafka_bootstrap, prefix, P1, "principal")
    arrived(kafka_bootstrap, prefix, third, P1)
    assert "Traceback" not in stop(router, log)
