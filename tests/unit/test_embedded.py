"""The embedded broker's and the standalone cluster's pure helpers (no broker or cluster started here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming.devtools.embedded_kafka import EmbeddedKafka, new_cluster_id
from streaming.devtools.spark_cluster import StandaloneCluster
from streaming.errors import RouterError
from streaming.jvm_flags import KAFKA_JVM_OPTIONS_ENV, SPARK_JVM_OPTIONS_ENV


def test_kafka_cluster_ids_never_look_like_an_option() -> None:
    """kafka-storage reads an id starting with '-' as a flag; the broker would then never start."""
    ids = [new_cluster_id() for _ in range(5000)]
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)


def test_a_joining_broker_takes_the_next_node_id_and_plaintext_only(tmp_path: Path) -> None:
    first = EmbeddedKafka(tmp_path / "one")
    assert first.node_id == 1 and EmbeddedKafka(tmp_path / "two", joins=first).node_id == 2
    with pytest.raises(ValueError, match="another node id"):
        EmbeddedKafka(tmp_path / "two", joins=first, node_id=1)
    with pytest.raises(ValueError, match="PLAINTEXT only"):
        EmbeddedKafka(tmp_path / "two", joins=first, tls=True)
    with pytest.raises(ValueError, match="PLAINTEXT only"):
        EmbeddedKafka(tmp_path / "two", joins=EmbeddedKafka(tmp_path / "one", sasl_users={"u": "p"}))


def test_a_joining_broker_is_a_broker_only_in_the_first_ones_quorum(tmp_path: Path) -> None:
    first = EmbeddedKafka(tmp_path / "one")
    first._write_config(9092, 9093)
    second = EmbeddedKafka(tmp_path / "two", joins=first)
    second._write_config(9094, 9095)
    written = dict(line.split("=", 1) for line in second.server_properties.read_text().splitlines())
    assert written["process.roles"] == "broker" and written["node.id"] == "2"
    assert written["controller.quorum.voters"] == "1@127.0.0.1:9093"
    assert written["listeners"] == "PLAINTEXT://127.0.0.1:9094"


def properties(broker: EmbeddedKafka) -> dict[str, str]:
    return dict(line.split("=", 1) for line in broker.server_properties.read_text().splitlines())


def test_a_single_node_keeps_one_replica_of_its_internal_topics(tmp_path: Path) -> None:
    node = EmbeddedKafka(tmp_path / "one")
    node._write_config(9092, 9093)
    written = properties(node)
    assert written["offsets.topic.replication.factor"] == "1"
    assert written["transaction.state.log.replication.factor"] == "1"
    assert written["transaction.state.log.min.isr"] == "1"
    assert "default.replication.factor" not in written and "min.insync.replicas" not in written


def test_each_broker_of_a_cluster_of_three_replicates_the_internal_topics_thrice(tmp_path: Path) -> None:
    """So that one broker may stop and leave consumer groups and transactions working."""
    first = EmbeddedKafka(tmp_path / "one", brokers=3)
    first._write_config(9092, 9093)
    third = EmbeddedKafka(tmp_path / "three", joins=first, node_id=3)
    third._write_config(9096, 9097)
    for broker in (first, third):
        written = properties(broker)
        assert written["offsets.topic.replication.factor"] == "3"
        assert written["transaction.state.log.replication.factor"] == "3"
        assert written["transaction.state.log.min.isr"] == "2"
        assert written["share.coordinator.state.topic.replication.factor"] == "3"
        assert written["default.replication.factor"] == "3" and written["min.insync.replicas"] == "2"
    with pytest.raises(ValueError, match="at least 1 broker"):
        EmbeddedKafka(tmp_path / "none", brokers=0)


def test_a_standalone_cluster_s_daemons_take_the_spark_jvms_flags_after_the_environment_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`SPARK_DAEMON_JAVA_OPTS` (the master's and workers' JVM flags): any the environment gives,
    then those of `ROUTER_JVM_OPTIONS`; a word that is not a flag is refused before any start."""
    monkeypatch.setenv("SPARK_DAEMON_JAVA_OPTS", "-Dfrom.environment=1")
    monkeypatch.setenv(SPARK_JVM_OPTIONS_ENV, "-XX:TieredStopAtLevel=1  -Xss2m")
    cluster = StandaloneCluster(tmp_path)
    flags = cluster._environment()["SPARK_DAEMON_JAVA_OPTS"]
    assert flags == "-Dfrom.environment=1 -XX:TieredStopAtLevel=1 -Xss2m"
    monkeypatch.delenv("SPARK_DAEMON_JAVA_OPTS")
    monkeypatch.delenv(SPARK_JVM_OPTIONS_ENV)
    assert cluster._environment()["SPARK_DAEMON_JAVA_OPTS"] == ""
    monkeypatch.setenv(SPARK_JVM_OPTIONS_ENV, "TieredStopAtLevel=1")
    with pytest.raises(RouterError, match="not a JVM flag"):
        cluster._environment()


def test_a_broker_flag_that_is_not_one_is_refused_before_the_storage_is_formatted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ROUTER_KAFKA_JVM_OPTIONS` is read first: a bad word stops the start with nothing written."""
    monkeypatch.setenv(KAFKA_JVM_OPTIONS_ENV, "-Xss2m gc.log")
    broker = EmbeddedKafka(tmp_path / "kafka")
    with pytest.raises(RouterError, match=r"'gc\.log' is not a JVM flag"):
        broker.start(detach=False)
    assert not (broker.data_dir / "meta.properties").exists()
    assert not broker.server_properties.exists()
