"""One Kafka connection for every client: the settings, both client dialects, and the refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming.config import load_connection, load_settings
from streaming.errors import ConfigError
from streaming.kafka.connection import KafkaConnection, connection_from, connection_of
from streaming.spark.sources import read_options, write_options

SASL = KafkaConnection(
    "b1:9093,b2:9093",
    security_protocol="SASL_SSL",
    sasl_mechanism="SCRAM-SHA-512",
    sasl_username="router",
    sasl_password='pa"ss\\word',
    ssl_ca_location="certs/ca.pem",
    client_id="router-i1",
)


def test_a_bare_bootstrap_is_a_plaintext_connection_with_nothing_else() -> None:
    connection = connection_of("127.0.0.1:19092")
    assert connection.client_config() == {"bootstrap.servers": "127.0.0.1:19092"}
    assert connection.java_properties() == {"bootstrap.servers": "127.0.0.1:19092"}
    assert connection_of(SASL) is SASL


def test_confluent_kafka_gets_the_security_settings_in_its_own_names() -> None:
    assert SASL.client_config(**{"group.id": "g"}) == {
        "bootstrap.servers": "b1:9093,b2:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "router",
        "sasl.password": 'pa"ss\\word',
        "ssl.ca.location": "certs/ca.pem",
        "client.id": "router-i1",
        "group.id": "g",
    }


def test_java_clients_get_the_same_settings_as_a_jaas_line_and_a_pem_truststore() -> None:
    props = SASL.java_properties()
    assert props["security.protocol"] == "SASL_SSL"
    assert props["sasl.mechanism"] == "SCRAM-SHA-512"
    assert props["sasl.jaas.config"] == (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="router" password="pa\\"ss\\\\word";'
    )
    assert props["ssl.truststore.type"] == "PEM" and props["ssl.truststore.location"] == "certs/ca.pem"
    assert SASL.spark_options() == {f"kafka.{k}": v for k, v in props.items()}


def test_plain_is_the_default_mechanism_with_sasl() -> None:
    plain = KafkaConnection("b:1", security_protocol="SASL_PLAINTEXT", sasl_username="u", sasl_password="p")
    assert plain.sasl_mechanism == "PLAIN"
    assert plain.java_properties()["sasl.jaas.config"].startswith(
        "org.apache.kafka.common.security.plain.PlainLoginModule required"
    )


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"security_protocol": "TLS"}, "security_protocol"),
        ({"security_protocol": "SASL_SSL", "sasl_username": "u"}, "sasl_password"),
        (
            {
                "security_protocol": "SASL_SSL",
                "sasl_username": "u",
                "sasl_password": "p",
                "sasl_mechanism": "GSSAPI",
            },
            "sasl_mechanism",
        ),
        ({"sasl_username": "u", "sasl_password": "p"}, "need security_protocol SASL"),
        ({"ssl_ca_location": "ca.pem"}, "needs security_protocol SSL"),
    ],
)
def test_an_incoherent_connection_is_refused_with_what_to_set(fields: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        KafkaConnection("b:1", **fields)  # type: ignore[arg-type]


def test_the_password_can_come_from_the_environment_and_is_never_printed() -> None:
    section = {"security_protocol": "SASL_PLAINTEXT", "sasl_username": "u", "sasl_password_env": "PW"}
    connection = connection_from("b:1", section, "router.yaml", environ={"PW": "hunter2"})
    assert connection.sasl_password == "hunter2"
    assert "hunter2" not in repr(connection) and "hunter2" not in connection.describe()
    with pytest.raises(ConfigError, match="'PW', which is not set"):
        connection_from("b:1", section, "router.yaml", environ={})
    with pytest.raises(ConfigError, match="unknown kafka setting"):
        connection_from("b:1", {"sasl_pasword": "x"}, "router.yaml")


def test_the_job_settings_give_spark_the_connection_every_other_client_gets(tmp_path: Path) -> None:
    path = tmp_path / "router.yaml"
    path.write_text(
        "instance: i1\nbootstrap: b:9093\nkafka:\n  security_protocol: SASL_PLAINTEXT\n"
        "  sasl_username: router\n  sasl_password: pw\nkafka_options:\n  kafka.max.poll.records: '500'\n"
    )
    settings = load_settings(path)
    assert settings.kafka == load_connection(path)
    assert "pw" not in settings.describe()
    for options in (read_options(settings), write_options(settings)):
        assert {k: options[k] for k in settings.kafka.spark_options()} == settings.kafka.spark_options()
        assert options["kafka.max.poll.records"] == "500"


def test_connection_settings_in_spark_only_options_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "router.yaml"
    path.write_text("instance: i1\nkafka_options:\n  kafka.security.protocol: SASL_SSL\n")
    with pytest.raises(ConfigError, match="connection settings, which every client needs"):
        load_settings(path)


def test_the_job_reads_committed_records_whatever_kafka_options_say(tmp_path: Path) -> None:
    # router redrive writes into the inputs in transactions: an aborted one's records must not be routed.
    path = tmp_path / "router.yaml"
    path.write_text("instance: i1\nkafka_options:\n  kafka.isolation.level: read_uncommitted\n")
    assert read_options(load_settings(path))["kafka.isolation.level"] == "read_committed"
