"""Issue 43: topics replicated as the settings ask; every producer writes with acks=all and idempotence."""

from __future__ import annotations

import ast
import logging
import re
from pathlib import Path

import pytest
from confluent_kafka.admin import BrokerMetadata, ClusterMetadata, PartitionMetadata, TopicMetadata

from streaming.config import load_connection, load_settings
from streaming.errors import ConfigError
from streaming.kafka import admin
from streaming.kafka.connection import KafkaConnection, producer_config, upsert_producer_config
from streaming.kafka.durability import AskedReplication, Replication
from streaming.spark.sources import write_options

PACKAGE = Path(__file__).resolve().parents[2] / "streaming"


@pytest.mark.parametrize(("brokers", "factor", "min_insync"), [(1, 1, 1), (2, 2, 1), (3, 3, 2), (5, 3, 2)])
def test_by_default_topics_get_the_clusters_brokers_up_to_three_and_one_fewer_in_sync(
    brokers: int, factor: int, min_insync: int
) -> None:
    assert AskedReplication().for_brokers(brokers) == Replication(factor, min_insync)


def test_a_factor_asked_is_kept_whatever_the_brokers_and_min_insync_follows_it() -> None:
    assert AskedReplication(factor=2).for_brokers(5) == Replication(2, 1)
    assert AskedReplication(factor=4).for_brokers(1) == Replication(4, 3)
    assert AskedReplication(factor=3, min_insync=3).for_brokers(3) == Replication(3, 3)
    assert AskedReplication(min_insync=1).for_brokers(3) == Replication(3, 1)
    assert Replication(3, 2).topic_config == {"min.insync.replicas": "2"}


def test_a_min_insync_above_the_default_factor_is_refused_when_the_cluster_is_known() -> None:
    asked = AskedReplication(min_insync=2)
    assert asked.for_brokers(3) == Replication(3, 2)
    with pytest.raises(ConfigError, match=r"min_insync_replicas 2 .* replication_factor is 1 \(the default"):
        asked.for_brokers(1)


def test_the_settings_file_gives_every_command_the_replication_it_asks(tmp_path: Path) -> None:
    path = tmp_path / "router.yaml"
    path.write_text("instance: i1\nreplication_factor: 2\nmin_insync_replicas: 1\n")
    settings = load_settings(path)
    assert settings.replication == AskedReplication(2, 1)
    # The commands that only connect (routes load, send, ...) create their topics as the file asks.
    assert load_connection(path).replication == AskedReplication(2, 1)
    (tmp_path / "default.yaml").write_text("instance: i1\n")
    assert load_settings(tmp_path / "default.yaml").replication == AskedReplication(None, None)


@pytest.mark.parametrize(
    ("lines", "says"),
    [
        ("replication_factor: 0\n", "replication_factor: expected a whole number of at least 1, got 0"),
        (
            "replication_factor: three\n",
            "replication_factor: expected a whole number of at least 1, got 'three'",
        ),
        ("replication_factor: true\n", "replication_factor: expected a whole number"),
        ("min_insync_replicas: -1\n", "min_insync_replicas: expected a whole number of at least 1, got -1"),
        (
            "replication_factor: 2\nmin_insync_replicas: 3\n",
            "min_insync_replicas 3 asks for more replicas than topics get: replication_factor is 2; "
            "lower min_insync_replicas, or raise replication_factor",
        ),
    ],
)
def test_a_wrong_replication_setting_is_refused_at_load_naming_the_file(
    tmp_path: Path, lines: str, says: str
) -> None:
    path = tmp_path / "router.yaml"
    path.write_text("instance: i1\n" + lines)
    with pytest.raises(ConfigError) as refused:
        load_settings(path)
    assert str(refused.value).startswith(f"{path}: ")
    assert says in str(refused.value)


def test_confluent_producers_and_sparks_sink_write_with_the_same_acks_and_idempotence(tmp_path: Path) -> None:
    config = producer_config("b:1", **{"linger.ms": 5})
    assert config == {"bootstrap.servers": "b:1", "acks": "all", "enable.idempotence": "true", "linger.ms": 5}
    path = tmp_path / "router.yaml"
    path.write_text("instance: i1\nkafka_options:\n  kafka.linger.ms: '5'\n")
    options = write_options(load_settings(path))
    assert {k.removeprefix("kafka."): options[k] for k in ("kafka.acks", "kafka.enable.idempotence")} == {
        "acks": config["acks"],
        "enable.idempotence": config["enable.idempotence"],
    }
    assert options["kafka.linger.ms"] == "5"


def test_no_producer_may_write_with_other_acks() -> None:
    with pytest.raises(ValueError, match=r"\['acks'\] are the router's"):
        producer_config("b:1", acks="1")
    with pytest.raises(ValueError, match=re.escape("enable.idempotence")):
        producer_config(KafkaConnection("b:1"), **{"enable.idempotence": False})


def test_writers_of_table_records_wait_for_every_replica_in_order_without_idempotence() -> None:
    config = upsert_producer_config(KafkaConnection("b:1"), **{"linger.ms": 5})
    assert config == {
        "bootstrap.servers": "b:1",
        "acks": "all",
        "enable.idempotence": "false",
        "max.in.flight.requests.per.connection": "1",
        "linger.ms": 5,
    }
    for fixed in ("acks", "enable.idempotence", "max.in.flight.requests.per.connection"):
        with pytest.raises(ValueError, match=re.escape(fixed)):
            upsert_producer_config("b:1", **{fixed: "5"})


def test_table_records_are_written_as_upserts_and_messages_with_idempotence() -> None:
    """The routes, catalogs, mirror roles and requests are written as upserts; `send_records`'s
    messages, and any write not said to be of table records, with idempotence."""
    from streaming.tables import topic_io

    source = Path(topic_io.__file__).read_text(encoding="utf-8")
    tree = ast.parse(source)
    calls = {
        function.name: [
            node
            for node in ast.walk(function)
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "produce_records"
        ]
        for function in tree.body
        if isinstance(function, ast.FunctionDef)
    }

    def upserts(node: ast.Call) -> bool:
        return any(k.arg == "upserts" and ast.literal_eval(k.value) is True for k in node.keywords)

    for table in (
        "publish_route_changes",
        "put_route",
        "migrate_routes",
        "publish_catalogs",
        "publish_mirror_roles",
    ):
        assert calls[table] and all(upserts(call) for call in calls[table]), table
    assert calls["send_records"] and not any(upserts(call) for call in calls["send_records"])


def test_spark_only_options_may_not_override_the_producers_acks(tmp_path: Path) -> None:
    path = tmp_path / "router.yaml"
    path.write_text("instance: i1\nkafka_options:\n  kafka.acks: '1'\n")
    with pytest.raises(ConfigError, match=r"\['kafka.acks'\]: every producer of the router writes with acks"):
        load_settings(path)


def test_every_producer_of_the_package_is_configured_by_producer_config() -> None:
    """One place builds producer settings: a Producer built from anything else would drift."""
    built: list[str] = []
    for source in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Producer":
                where = f"{source.relative_to(PACKAGE.parent)}:{node.lineno}"
                config = node.args[0] if node.args else None
                named = getattr(config.func, "id", None) if isinstance(config, ast.Call) else None
                assert named in ("producer_config", "upsert_producer_config"), (
                    f"{where}: expected Producer(producer_config(...)) or "
                    f"Producer(upsert_producer_config(...)), got {ast.unparse(node)}"
                )
                built.append(where)
    assert len(built) >= 3, built  # the record writer's two and the endpoint's


def metadata(brokers: int, topics: dict[str, int]) -> ClusterMetadata:
    """Cluster metadata as the admin client gives it: `brokers` brokers, each topic with 2 partitions
    of the given number of replicas."""
    cluster = ClusterMetadata()
    for n in range(1, brokers + 1):
        broker = BrokerMetadata()
        # confluent-kafka sets host to None in __init__, unannotated, so its type is None alone.
        broker.id, broker.host, broker.port = n, "127.0.0.1", 9000 + n  # type: ignore[assignment]
        cluster.brokers[n] = broker
    for name, replicas in topics.items():
        topic = TopicMetadata()
        topic.topic = name
        for p in range(2):
            partition = PartitionMetadata()
            partition.id, partition.leader = p, 1
            partition.replicas = partition.isrs = list(range(1, replicas + 1))
            topic.partitions[p] = partition
        cluster.topics[name] = topic
    return cluster


def test_an_existing_topic_with_fewer_replicas_is_reported_once_with_the_fix(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="streaming.kafka.admin")
    cluster = metadata(3, {"t.few": 1, "t.enough": 3})
    bootstrap = "127.0.0.1:9001"
    asked = admin.replication_of(bootstrap, cluster)
    assert asked == Replication(3, 2)
    for _ in range(3):
        admin._report_missing_replicas(bootstrap, cluster, ["t.few", "t.enough", "t.absent"], asked)
    lines = [r.getMessage() for r in caplog.records if r.name == "streaming.kafka.admin"]
    assert len(lines) == 1, lines
    (line,) = lines
    assert "topic t.few at 127.0.0.1:9001 has 1 replica(s) per partition where 3 are asked" in line
    assert "left as it is" in line
    assert "kafka-reassign-partitions.sh --bootstrap-server 127.0.0.1:9001" in line
    assert "--entity-name t.few --add-config min.insync.replicas=2" in line
    assert "\n" not in line
