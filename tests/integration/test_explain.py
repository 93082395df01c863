"""`router explain` on the real broker, after the real Spark job routed the demo's three instances.

The demo's tables (`routes/demo/`: i1 with AW, the forwarder f1, i2 with Parts) are loaded under a
fresh prefix; a few messages are sent and routed by one job for [i1, f1, i2] (one replay per hop:
a replay reads each inbound topic up to where it ended when it started). Then the command is run
as `streaming.cli.main` runs it, and what it prints is checked against what the router wrote.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from streaming import topics
from streaming.cli import main
from streaming.config import load_settings
from streaming.jars import project_root
from streaming.kafka.avro import new_message_record
from streaming.spark.job import RouterJob
from streaming.tables.loading import load_catalog_files, load_route_files
from streaming.tables.topic_io import produce_records, publish_catalogs, publish_routes, send_records

pytestmark = pytest.mark.integration

DEMO = project_root() / "routes" / "demo"
RETRY_S = 600.0
"""Longer than the test: the delayed message is delayed once and stays so (D2)."""


@dataclass(frozen=True)
class Routed:
    bootstrap: str
    prefix: str
    delivered: str
    """To OrderParts: i1 sends it to f1, f1 forwards it to i2, i2 delivers it into Parts."""
    delayed: str
    """To a service nobody hosts: i1 delays it (AW's AutoCreatedLocal cannot locate it, C2)."""
    spent: str
    """To OrderParts with no hop left: f1 discards it (F3)."""
    stray: str
    """Written to f1's inbound from outside, for a service f1's msdb has no route for: dropped (M7, D5)."""
    invalid: str
    """Decodes, but names a database i1 does not have: dead-lettered by i1."""
    routed_at: datetime
    """After the last replay: every record was written before it."""


def message(message_id: str, service: str, **fields: object) -> dict[str, object]:
    record = new_message_record(
        message_id=message_id,
        conversation_id=f"conv-{message_id}",
        to_service=service,
        from_service="InitiatorService",
        origin_database="AW",
        enqueued_at=datetime.now(timezone.utc),
        body=b"<order/>",
    )
    record.update(fields)
    return record


@pytest.fixture(scope="module")
def routed(spark: SparkSession, kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Routed:
    prefix = f"explain{uuid.uuid4().hex[:10]}"
    instances = [replace(i, retry_s=RETRY_S) for i in load_catalog_files([DEMO / "catalogs.yaml"])]
    publish_catalogs(kafka_bootstrap, instances, topics.catalogs_topic(prefix))
    now = datetime.now(timezone.utc)
    publish_routes(
        kafka_bootstrap, load_route_files([DEMO / "routes.yaml"], now=now), topics.routes_topic(prefix)
    )
    tag = uuid.uuid4().hex[:8]
    ids = {name: f"{name}-{tag}" for name in ("delivered", "delayed", "spent", "stray", "invalid")}
    send_records(
        kafka_bootstrap,
        topics.outbound_topic("i1", prefix),
        [
            message(ids["delivered"], "OrderParts"),
            message(ids["delayed"], "NoSuchService"),
            message(ids["spent"], "OrderParts", hops_remaining=0),
            message(ids["invalid"], "AuditService", origin_database="NotADatabase"),
        ],
    )
    send_records(
        kafka_bootstrap,
        topics.inbound_topic("f1", prefix),
        [message(ids["stray"], "ServiceNobodyRoutes", origin_database=None)],
    )
    settings = load_settings(
        None,
        instances=["i1", "f1", "i2"],
        bootstrap=kafka_bootstrap,
        topic_prefix=prefix,
        checkpoint_dir=str(Path(tmp_path_factory.mktemp("explain")) / "all"),
    )
    job = RouterJob(spark, settings)
    try:
        for _ in range(3):  # i1's decisions, then f1's, then i2's
            job.replay(timeout_s=300)
    finally:
        job.close()
    return Routed(kafka_bootstrap, prefix, routed_at=datetime.now(timezone.utc), **ids)


def explain(
    routed: Routed, capsys: pytest.CaptureFixture[str], message_id: str, *flags: str
) -> tuple[int, str]:
    code = main(
        ["explain", message_id, "--topic-prefix", routed.prefix, "--bootstrap", routed.bootstrap, *flags]
    )
    out = capsys.readouterr().out
    return code, out


def hop_lines(out: str) -> list[list[str]]:
    """The numbered hop lines, split into words."""
    return [line.split() for line in out.splitlines() if line.startswith("  ") and line.split()[0].isdigit()]


def test_a_message_through_the_forwarder_shows_three_hops(
    routed: Routed, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = explain(routed, capsys, routed.delivered)
    assert code == 0, out
    p = routed.prefix
    assert out.splitlines()[0].startswith(
        f"message {routed.delivered} (conversation conv-{routed.delivered}, OrderParts from InitiatorService "
        "in AW), sent "
    )
    assert out.splitlines()[0].endswith(f"to {p}.i1.outbound")
    hops = hop_lines(out)
    assert [(h[1], h[3], h[4], h[5], h[6] + h[7]) for h in hops] == [
        ("i1", "send", "route", "OrderPartsRoute", "(M2,C3)"),
        ("f1", "forward", "route", "ToOrderParts", "(M2,C3)"),
        ("i2", "deliver", "route", "AutoCreatedLocal", "(M5,C2)"),
    ]
    assert [h[9] for h in hops] == [f"{p}.f1.inbound", f"{p}.i2.inbound", f"{p}.i2.queue.Parts.OrderParts"]
    assert all(h[10] == "snapshot" and h[11].startswith("routes@p0:") for h in hops)
    assert out.splitlines()[-1] == f"now: delivered to Parts/OrderParts on i2 ({p}.i2.queue.Parts.OrderParts)"

    code, out = explain(routed, capsys, routed.delivered, "--json")
    document = json.loads(out)
    assert code == 0 and document["found"] is True
    assert [(h["instance"], h["outcome"], h["kind"]) for h in document["hops"]] == [
        ("i1", "send", "inbound"),
        ("f1", "forward", "inbound"),
        ("i2", "deliver", "queue"),
    ]
    assert [h["hops_remaining"] for h in document["hops"]] == [16, 15, 15]  # F3: the forward took one
    assert document["now"]["state"] == "delivered"


def test_a_message_for_a_service_nobody_hosts_waits_delayed_with_its_reason(
    routed: Routed, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = explain(routed, capsys, routed.delayed)
    assert code == 0, out
    (hop,) = hop_lines(out)
    assert hop[1] == "i1" and hop[3:5] == ["delayed", "(service_not_found)"]
    assert hop[5:8] == ["no", "usable", "route"] and hop[8] == "(M5)"  # AW's AutoCreatedLocal: C2 found no AW
    line = next(line for line in out.splitlines() if line.startswith("  1 "))
    assert f"-> {routed.prefix}.i1.delayed" in line and "attempt 1, due " in line
    now_line = out.splitlines()[-1]
    assert now_line.startswith(f"now: waiting in {routed.prefix}.i1.delayed (service_not_found), due at ")
    due = datetime.fromisoformat(now_line.split("due at ")[1].split()[0].replace("Z", "+00:00"))
    assert 0 < (due - routed.routed_at).total_seconds() <= RETRY_S  # D2: retry_s after its decision


def test_a_message_with_no_hop_left_is_discarded_by_the_forwarder(
    routed: Routed, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = explain(routed, capsys, routed.spent, "--steps")
    assert code == 0, out
    hops = hop_lines(out)
    assert [(h[1], h[3], h[4]) for h in hops] == [
        ("i1", "send", "route"),
        ("f1", "discarded", "(hops_exhausted)"),
    ]
    assert f"now: discarded by f1 (hops_exhausted) in {routed.prefix}.f1.dropped" in out
    # The replay of f1's decision says which check discarded it.
    assert "steps: f1's decision of " in out
    assert "  F3     * hops_remaining is 0: the hop budget is spent; discarded (LP1)" in out
    assert "today's tables decide the same: discarded by route ToOrderParts (M2, C3): hops_exhausted" in out


def test_a_message_from_outside_with_no_route_is_dropped(
    routed: Routed, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = explain(routed, capsys, routed.stray)
    assert code == 0, out
    assert "arrived " in out.splitlines()[0] and f"on {routed.prefix}.f1.inbound from outside" in out
    (hop,) = hop_lines(out)
    assert hop[1] == "f1" and hop[3:8] == ["dropped", "(no_route)", "no", "route", "(M7)"]
    assert f"now: dropped by f1 (no_route) in {routed.prefix}.f1.dropped" in out
    assert "whose sender retries (D5)" in out


def test_a_record_that_names_no_database_of_its_instance_is_found_dead_lettered(
    routed: Routed, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = explain(routed, capsys, routed.invalid, "--steps")
    assert code == 0, out
    (hop,) = hop_lines(out)
    assert hop[1] == "i1" and hop[3] == "dead-lettered"
    error = "origin_database is not a database of this instance: NotADatabase"
    assert f"now: dead-lettered by i1 in {routed.prefix}.i1.deadletter: {error}" in out
    assert f"1: error: {error} (read from {routed.prefix}.i1.outbound[0]@" in out
    assert "steps: the record was dead-lettered by i1 before any rule ran" in out


def test_an_unknown_id_exits_1_naming_the_topics_and_the_window(
    routed: Routed, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = explain(routed, capsys, f"no-such-{uuid.uuid4()}", "--since", "2h")
    assert code == 1
    first = out.splitlines()[0]
    assert f"under prefix '{routed.prefix}' (" in first and "(--since 2h)" in first
    # i1, f1 and i2 each have outbound, inbound, delayed, dropped and dead-letter topics, and the
    # queues the routes reach; the compacted tables are not searched.
    assert "3 outbound, 3 inbound, 3 delayed" in first and "3 dropped, 3 deadletter" in first
    assert "queue" in first and "routes" not in first
    document = json.loads(explain(routed, capsys, f"no-such-{uuid.uuid4()}", "--json")[1])
    assert document["found"] is False and document["records_read"] > 0
    # A window that starts after every record was written finds nothing, not even the delivered one.
    code, out = explain(routed, capsys, routed.delivered, "--since", routed.routed_at.isoformat())
    assert code == 1 and ": 0 record(s) read" in out.splitlines()[0]


def test_steps_replay_the_delivery_and_see_a_dropped_route(
    routed: Routed, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = explain(routed, capsys, routed.delivered, "--steps")
    assert code == 0, out
    steps = out[out.index("steps: i2's decision of ") :]
    assert "  S3       it arrived from another instance: msdb's routes decide" in steps
    assert "  M2       no route naming OrderParts without a broker instance" in steps
    assert "  M5     * matched 1 route(s) with no service and no broker instance (wildcards)" in steps
    assert "         + AutoCreatedLocal (*, *, LOCAL): names neither service nor broker instance" in steps
    assert "  C2     * LOCAL routes: 1 usable; chose AutoCreatedLocal" in steps
    assert "today's tables decide the same: deliver into Parts by route AutoCreatedLocal (M5, C2)" in steps

    # DROP ROUTE AutoCreatedLocal in i2's msdb: a tombstone on the routes topic.
    produce_records(
        routed.bootstrap, topics.routes_topic(routed.prefix), [(b"i2/msdb/AutoCreatedLocal", None, None)]
    )
    code, out = explain(routed, capsys, routed.delivered, "--steps")
    assert code == 0, out
    assert "  M7     * no route matched: dropped (no_route)" in out
    assert (
        "today: dropped (M7): no_route; the headers record deliver into Parts by route AutoCreatedLocal "
        "(M5, C2): route AutoCreatedLocal is no longer in i2's msdb table (dropped since); "
        "the tables changed since"
    ) in out
    document = json.loads(explain(routed, capsys, routed.delivered, "--steps", "--json")[1])
    assert document["steps"]["differs"] == ["outcome", "route", "match_step", "choice_step", "reason"]
    assert document["steps"]["recorded"]["route"] == "AutoCreatedLocal"
