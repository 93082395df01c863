"""`router whatif` on the real broker and real Spark: a window with a known change, counted exactly.

i1 (the demo's catalogs) has live AW routes: AutoCreatedLocal (LOCAL), OrderPartsRoute (OrderParts
to the forwarder f1) and StockRoute (Stock to f1). The change file moves StockRoute to i2's address
and drops OrderPartsRoute, so exactly the messages to Stock change destination (f1's inbound ->
i2's), those to OrderParts become delayed (AutoCreatedLocal cannot locate the service on i1, C2),
and those to AuditService (local) stay as they are. The messages are written to i1's outbound
topic by hand, with two records that do not decode, and one conversation's kept choice of
StockRoute is on i1's choices topic. Every run checks that the end offsets of every topic of the
prefix, and the topics themselves, are what they were.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from streaming import topics
from streaming.cli import main
from streaming.jars import project_root
from streaming.kafka.admin import end_offsets, ensure_topics, topic_names
from streaming.kafka.avro import new_message_record
from streaming.tables.loading import load_catalog_files, load_route_files
from streaming.tables.topic_io import produce_records, publish_catalogs, publish_routes, send_records

pytestmark = pytest.mark.integration

DEMO = project_root() / "routes" / "demo"
LIVE = """
instance: i1
routes:
  - {scope: AW, name: AutoCreatedLocal, address: LOCAL}
  - {scope: AW, name: OrderPartsRoute, service: OrderParts, address: "TCP://f1.example:4022"}
  - {scope: AW, name: StockRoute, service: Stock, address: "TCP://f1.example:4022"}
"""
CHANGE = """
-- instance: i1
USE AW;
ALTER ROUTE StockRoute WITH ADDRESS = 'TCP://i2.example:4022';
DROP ROUTE OrderPartsRoute;
"""
STOCK, ORDERS, AUDIT = 30, 20, 25
"""Messages to each service: Stock over 10 conversations, OrderParts and AuditService one each."""


def message(message_id: str, conversation: str, service: str) -> dict[str, object]:
    return new_message_record(
        message_id=message_id,
        conversation_id=conversation,
        to_service=service,
        from_service="InitiatorService",
        origin_database="AW",
        enqueued_at=datetime.now(timezone.utc),
        body=b"<order/>",
    )


@pytest.fixture(scope="module")
def recorded(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    prefix = f"whatif{uuid.uuid4().hex[:10]}"
    folder = tmp_path_factory.mktemp("whatif")
    instances = load_catalog_files([DEMO / "catalogs.yaml"])
    publish_catalogs(kafka_bootstrap, instances, topics.catalogs_topic(prefix))
    live = folder / "live.yaml"
    live.write_text(LIVE)
    now = datetime.now(timezone.utc)
    publish_routes(kafka_bootstrap, load_route_files([live], now=now), topics.routes_topic(prefix))
    (folder / "change.sql").write_text(CHANGE)
    records = [message(f"stock-{n:03d}", f"conv-stock-{n % 10}", "Stock") for n in range(STOCK)]
    records += [message(f"orders-{n:03d}", f"conv-orders-{n:03d}", "OrderParts") for n in range(ORDERS)]
    records += [message(f"audit-{n:03d}", f"conv-audit-{n:03d}", "AuditService") for n in range(AUDIT)]
    outbound = topics.outbound_topic("i1", prefix)
    send_records(kafka_bootstrap, outbound, records)
    produce_records(kafka_bootstrap, outbound, [(b"junk", b"\x00not avro", None), (b"junk", b"", None)])
    choices = topics.choices_topic("i1", prefix)
    ensure_topics(kafka_bootstrap, [choices], compacted=True)

    def choice(conversation: str, service: str | None, address: str) -> tuple[bytes, bytes, None]:
        key = "\u0000".join(("i1", conversation, "AW", service or "Audit")).encode()
        value = {
            "instance": "i1",
            "conversation_id": conversation,
            "origin": "AW",
            "service": service or "AuditService",
            "bid": None,
            "route_service": service,
            "address": address,
        }
        return key, json.dumps(value).encode(), None

    # conv-stock-3 kept StockRoute (removed by the change: its address moves); conv-audit-000 kept
    # AutoCreatedLocal, which stays.
    produce_records(
        kafka_bootstrap,
        choices,
        [choice("conv-stock-3", "Stock", "TCP://f1.example:4022"), choice("conv-audit-000", None, "LOCAL")],
    )
    return prefix, folder


def offsets_of(bootstrap: str, prefix: str) -> dict[str, dict[int, int]]:
    """The end offsets of every topic of the prefix."""
    return {
        name: end_offsets(bootstrap, name)
        for name in sorted(topic_names(bootstrap))
        if name.startswith(prefix)
    }


def whatif(bootstrap: str, prefix: str, *args: str) -> int:
    return main(["whatif", *args, "--instance", "i1", "--bootstrap", bootstrap, "--topic-prefix", prefix])


def test_the_moved_and_the_dropped_route_change_exactly_their_messages(
    spark: SparkSession,
    kafka_bootstrap: str,
    recorded: tuple[str, Path],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    prefix, folder = recorded
    before = offsets_of(kafka_bootstrap, prefix)
    chart = tmp_path / "changes.png"
    code = whatif(kafka_bootstrap, prefix, str(folder / "change.sql"), "--json", "--chart", str(chart))
    out, err = capsys.readouterr()
    assert code == 0, err
    report = json.loads(out)
    p = prefix
    assert report["decided"] == STOCK + ORDERS + AUDIT
    assert report["undecodable"] == 2
    assert report["changed"] == STOCK + ORDERS
    changes = {
        (c["from"]["topic"], c["from"]["outcome"], c["to"]["topic"], c["to"]["outcome"], c["to"]["reason"]): (
            c["messages"],
            c["examples"],
        )
        for c in report["changes"]
    }
    assert set(changes) == {
        (f"{p}.f1.inbound", "send", f"{p}.i2.inbound", "send", None),
        (f"{p}.f1.inbound", "send", f"{p}.i1.delayed", "delayed", "service_not_found"),
    }
    stock, stock_ids = changes[(f"{p}.f1.inbound", "send", f"{p}.i2.inbound", "send", None)]
    orders, order_ids = changes[
        (f"{p}.f1.inbound", "send", f"{p}.i1.delayed", "delayed", "service_not_found")
    ]
    assert (stock, orders) == (STOCK, ORDERS)
    assert stock_ids and all(i.startswith("stock-") for i in stock_ids)
    assert order_ids and all(i.startswith("orders-") for i in order_ids)
    assert report["newly_delayed"] == [{"service": "OrderParts", "messages": ORDERS, "conversations": ORDERS}]
    assert report["kept_choices_removed"] == [
        {
            "scope": "AW",
            "address": "tcp://f1.example:4022",
            "service": "Stock",
            "broker_instance": None,
            "conversations": 1,
            "examples": ["conv-stock-3"],
        }
    ]
    assert f"read {STOCK + ORDERS + AUDIT + 2} record(s) of i1" in err
    assert "wrote nothing to Kafka" in err
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert offsets_of(kafka_bootstrap, prefix) == before


def test_the_table_for_people_and_a_window_of_the_last_records(
    spark: SparkSession, kafka_bootstrap: str, recorded: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    prefix, folder = recorded
    before = offsets_of(kafka_bootstrap, prefix)
    assert whatif(kafka_bootstrap, prefix, str(folder / "change.sql"), "--max", "10") == 0
    out, err = capsys.readouterr()
    # The last ten records: eight AuditService messages and the two that do not decode.
    assert (
        out.splitlines()[0] == "i1: 0 of 8 message(s) would change (2 record(s) that do not decode left out)"
    )
    assert "read 10 record(s) of i1 (the last 10 record(s))" in err
    code = whatif(kafka_bootstrap, prefix, str(folder / "change.sql"), "--since", "1h")
    out, _ = capsys.readouterr()
    assert code == 0
    lines = out.splitlines()
    decided, changed = STOCK + ORDERS + AUDIT, STOCK + ORDERS
    left_out = "(2 record(s) that do not decode left out)"
    assert lines[0] == f"i1: {changed} of {decided} message(s) would change {left_out}"
    assert lines[2].split() == ["FROM", "TOPIC", "OUTCOME", "TO", "TOPIC", "OUTCOME", "MESSAGES", "EXAMPLES"]
    assert lines[3].split()[:5] == [
        f"{prefix}.f1.inbound",
        "send",
        f"{prefix}.i2.inbound",
        "send",
        str(STOCK),
    ]
    assert "services that would start to be delayed:" in lines
    kept = lines.index("kept choices (K2) naming a route the change removes:")
    assert lines[kept + 2].split() == ["AW", "Stock", "*", "tcp://f1.example:4022", "1", "conv-stock-3"]
    # A choice older than the router keeps one (keep_choice_s) is not counted.
    code = whatif(kafka_bootstrap, prefix, str(folder / "change.sql"), "--keep-choice-s", "0.001")
    out, _ = capsys.readouterr()
    assert code == 0
    assert "kept choices (K2) naming a route the change removes: none" in out.splitlines()
    assert offsets_of(kafka_bootstrap, prefix) == before


def test_bad_input_is_one_line_and_writes_nothing(
    kafka_bootstrap: str, recorded: tuple[str, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    prefix, folder = recorded
    before = offsets_of(kafka_bootstrap, prefix)
    names = topic_names(kafka_bootstrap)
    bad = tmp_path / "bad.yaml"
    bad.write_text("instance: i1\nroutes:\n  - {scope: AW, name: Broken, address: 'not an address'}\n")
    chart = tmp_path / "never.png"
    cases = {
        "unknown instance": (
            ["whatif", str(folder / "change.sql"), "--instance", "i9"],
            "--instance: expected an instance of the catalogs",
        ),
        "routes file that does not load": (
            ["whatif", str(bad), "--instance", "i1", "--chart", str(chart)],
            str(bad),
        ),
        "window with no records": (
            ["whatif", str(folder / "change.sql"), "--instance", "i2", "--chart", str(chart)],
            "found none",
        ),
        "both windows": (
            ["whatif", str(folder / "change.sql"), "--instance", "i1", "--since", "1h", "--max", "5"],
            "expected --since or --max, got both",
        ),
    }
    for what, (argv, expected) in cases.items():
        code = main([*argv, "--bootstrap", kafka_bootstrap, "--topic-prefix", prefix])
        out, err = capsys.readouterr()
        assert code == 2, what
        assert out == "", what
        assert len(err.strip().splitlines()) == 1, (what, err)
        assert err.startswith("router whatif: error: ") and expected in err, (what, err)
    assert not chart.exists()
    assert topic_names(kafka_bootstrap) == names
    assert offsets_of(kafka_bootstrap, prefix) == before
