"""How every Kafka client of the router connects: one setting, read once, used by all of them.

Spark's Kafka source and sink (Java clients), the AdminClient, the table readers and writers,
`router send` and `tail`, and the demo connect with one `KafkaConnection`: the bootstrap servers
and the security settings. It speaks both dialects: `client_config()` for confluent-kafka
(librdkafka) and `java_properties()` for the Java clients (`spark_options()` is the same with
Spark's `kafka.` prefix), so a secured cluster needs its settings written once.

In a settings file (streaming/config.py) it is the `bootstrap` key and the `kafka` section:

    bootstrap: broker1:9093,broker2:9093
    kafka:
      security_protocol: SASL_SSL      # PLAINTEXT (default), SASL_PLAINTEXT, SSL, SASL_SSL
      sasl_mechanism: PLAIN            # PLAIN (default with SASL), SCRAM-SHA-256, SCRAM-SHA-512
      sasl_username: router
      sasl_password_env: ROUTER_KAFKA_PASSWORD   # or sasl_password: ... (never printed)
      ssl_ca_location: certs/ca.pem    # PEM certificates to trust (SSL, SASL_SSL); default: the system's
      client_id: router-i1

A bare bootstrap string, where a function takes a connection, is a PLAINTEXT connection to it
(`connection_of`): the embedded broker of the demo, the tests and the bench listens that way.

The connection also carries the settings file's `replication_factor` and `min_insync_replicas`
(`replication`), so that every command that creates a topic creates it as the file asks, and
`producer_config` is how every confluent-kafka Producer is configured (`acks=all`, idempotence;
`upsert_producer_config` for the writers of table records: streaming/kafka/durability.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from streaming.errors import ConfigError
from streaming.kafka.durability import AskedReplication, producer_settings, upsert_settings

PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
KEYS = (
    "security_protocol",
    "sasl_mechanism",
    "sasl_username",
    "sasl_password",
    "sasl_password_env",
    "ssl_ca_location",
    "client_id",
)
"""The keys of a settings file's `kafka` section."""

ClientValue = str | int | float | bool
"""A confluent-kafka configuration value."""

_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}

CONNECTION_PROPERTIES = frozenset(
    {
        "bootstrap.servers",
        "security.protocol",
        "sasl.mechanism",
        "sasl.mechanisms",
        "sasl.jaas.config",
        "sasl.username",
        "sasl.password",
        "ssl.truststore.location",
        "ssl.truststore.type",
        "ssl.ca.location",
        "client.id",
    }
)
"""Client properties that belong to the connection: written elsewhere, only some clients would get them."""


@dataclass(frozen=True)
class KafkaConnection:
    """The bootstrap servers and security settings every client of the router connects with."""

    bootstrap: str
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_ca_location: str | None = None
    client_id: str | None = None
    replication: AskedReplication = AskedReplication()
    """How the topics its clients create are replicated (the settings' `replication_factor`, ...)."""

    def __post_init__(self) -> None:
        if not self.bootstrap.strip():
            raise ConfigError("bootstrap: expected host:port[,host:port...], got nothing")
        if self.security_protocol not in PROTOCOLS:
            raise ConfigError(
                f"kafka.security_protocol: expected one of {', '.join(PROTOCOLS)}, "
                f"got {self.security_protocol!r}"
            )
        if self.sasl:
            if self.sasl_mechanism is None:
                object.__setattr__(self, "sasl_mechanism", "PLAIN")
            if self.sasl_mechanism not in MECHANISMS:
                raise ConfigError(
                    f"kafka.sasl_mechanism: expected one of {', '.join(MECHANISMS)}, "
                    f"got {self.sasl_mechanism!r}"
                )
            if not self.sasl_username or self.sasl_password is None:
                raise ConfigError(
                    f"kafka: security_protocol {self.security_protocol} needs sasl_username and "
                    "sasl_password (or sasl_password_env, the name of a variable that holds it)"
                )
        elif self.sasl_mechanism or self.sasl_username or self.sasl_password is not None:
            raise ConfigError(
                f"kafka: sasl_* settings need security_protocol SASL_PLAINTEXT or SASL_SSL, "
                f"got {self.security_protocol}"
            )
        if self.ssl_ca_location is not None and not self.tls:
            raise ConfigError(
                f"kafka.ssl_ca_location needs security_protocol SSL or SASL_SSL, got {self.security_protocol}"
            )

    @property
    def sasl(self) -> bool:
        """Whether the client authenticates with SASL."""
        return self.security_protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        """Whether the connection is encrypted with TLS."""
        return self.security_protocol.endswith("SSL")

    def client_config(self, **extra: ClientValue) -> dict[str, ClientValue]:
        """confluent-kafka (librdkafka) configuration, with `extra` (group ids, tuning) added."""
        config: dict[str, ClientValue] = {"bootstrap.servers": self.bootstrap}
        if self.security_protocol != "PLAINTEXT":
            config["security.protocol"] = self.security_protocol
        if self.sasl:
            assert self.sasl_mechanism is not None and self.sasl_username is not None  # __post_init__
            config["sasl.mechanism"] = self.sasl_mechanism
            config["sasl.username"] = self.sasl_username
            config["sasl.password"] = self.sasl_password or ""
        if self.ssl_ca_location is not None:
            config["ssl.ca.location"] = self.ssl_ca_location
        if self.client_id is not None:
            config["client.id"] = self.client_id
        found = connection_keys(extra)
        if found:
            raise ValueError(
                f"client_config: {found} come from the connection, not from a client's own settings"
            )
        config.update(extra)
        return config

    def java_properties(self) -> dict[str, str]:
        """The same settings as Java client properties (Spark's source and sink, Kafka's tools)."""
        props = {"bootstrap.servers": self.bootstrap}
        if self.security_protocol != "PLAINTEXT":
            props["security.protocol"] = self.security_protocol
        if self.sasl:
            assert self.sasl_mechanism is not None and self.sasl_username is not None  # __post_init__
            props["sasl.mechanism"] = self.sasl_mechanism
            props["sasl.jaas.config"] = jaas_config(
                self.sasl_mechanism, self.sasl_username, self.sasl_password or ""
            )
        if self.ssl_ca_location is not None:
            props["ssl.truststore.type"] = "PEM"
            props["ssl.truststore.location"] = self.ssl_ca_location
        if self.client_id is not None:
            props["client.id"] = self.client_id
        return props

    def spark_options(self) -> dict[str, str]:
        """`java_properties()` as options of Spark's Kafka source and sink (`kafka.` prefixed)."""
        return {f"kafka.{k}": v for k, v in self.java_properties().items()}

    def describe(self) -> str:
        """One line for logs and errors; the password is never shown."""
        parts = [self.bootstrap, self.security_protocol]
        if self.sasl:
            parts.append(f"{self.sasl_mechanism} as {self.sasl_username}")
        return " ".join(parts)


Kafka = KafkaConnection | str
"""Where a function connects: a `KafkaConnection`, or a bare bootstrap string (PLAINTEXT)."""


def connection_of(kafka: Kafka) -> KafkaConnection:
    """`kafka` as a `KafkaConnection`; a bare bootstrap string is a PLAINTEXT connection to it."""
    return kafka if isinstance(kafka, KafkaConnection) else KafkaConnection(kafka)


def bootstrap_of(kafka: Kafka) -> str:
    """The bootstrap servers `kafka` connects to (for messages)."""
    return connection_of(kafka).bootstrap


def client_config(kafka: Kafka, **extra: ClientValue) -> dict[str, ClientValue]:
    """`KafkaConnection.client_config` of `kafka`."""
    return connection_of(kafka).client_config(**extra)


def producer_config(kafka: Kafka, **extra: ClientValue) -> dict[str, ClientValue]:
    """A confluent-kafka Producer's configuration: the connection, `acks=all` and idempotence, `extra`."""
    return client_config(kafka, **producer_settings(**extra))


def upsert_producer_config(kafka: Kafka, **extra: ClientValue) -> dict[str, ClientValue]:
    """A confluent-kafka Producer's configuration for table records: the connection, `UPSERT_SETTINGS`.

    `acks=all`, one request in flight, no idempotence (`streaming.kafka.durability`), then `extra`.
    """
    return client_config(kafka, **upsert_settings(**extra))


def connection_from(
    bootstrap: str,
    section: Mapping[str, Any] | None,
    where: str,
    environ: Mapping[str, str] | None = None,
    replication: AskedReplication | None = None,
) -> KafkaConnection:
    """Build the connection from a settings file's `bootstrap` and `kafka` section (see the module doc).

    `sasl_password_env` names an environment variable that holds the password, so that the file
    holds no secret; a variable that is not set is an error naming it. `replication` is the file's
    `replication_factor` and `min_insync_replicas` (none: the defaults).
    """
    raw = dict(section or {})
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown kafka setting(s) {unknown}; known: {list(KEYS)}")
    env = os.environ if environ is None else environ
    password = raw.get("sasl_password")
    variable = raw.get("sasl_password_env")
    if variable is not None:
        if password is not None:
            raise ConfigError(f"{where}: kafka: give sasl_password or sasl_password_env, not both")
        if str(variable) not in env:
            raise ConfigError(
                f"{where}: kafka.sasl_password_env names {variable!r}, which is not set in the environment"
            )
        password = env[str(variable)]

    def text(key: str) -> str | None:
        value = raw.get(key)
        return None if value is None else str(value)

    mechanism = text("sasl_mechanism")
    try:
        return KafkaConnection(
            bootstrap=bootstrap,
            security_protocol=str(raw.get("security_protocol", "PLAINTEXT")).upper(),
            sasl_mechanism=None if mechanism is None else mechanism.upper(),
            sasl_username=text("sasl_username"),
            sasl_password=None if password is None else str(password),
            ssl_ca_location=text("ssl_ca_location"),
            client_id=text("client_id"),
            replication=replication or AskedReplication(),
        )
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def check_no_connection_options(options: Mapping[str, str], where: str) -> None:
    """Refuse connection settings among Spark-only `kafka_options`: every client must get them."""
    found = connection_keys(k.removeprefix("kafka.") for k in options)
    if found:
        raise ConfigError(
            f"{where}: kafka_options {found} are connection settings, which every client needs, not "
            "only Spark: put the bootstrap servers in `bootstrap` and security in the `kafka` section "
            f"({', '.join(KEYS)})"
        )


def connection_keys(keys: Iterable[str]) -> list[str]:
    """The client properties among `keys` that belong to the connection (`CONNECTION_PROPERTIES`), sorted."""
    return sorted(k for k in keys if k in CONNECTION_PROPERTIES)


def jaas_config(mechanism: str, username: str, password: str, more: Mapping[str, str] | None = None) -> str:
    """A Java `sasl.jaas.config` line for `mechanism`'s login module, with `more` options after the user's.

    The clients' line, and the embedded broker's (whose `more` lists the users it accepts).
    """
    options = {"username": username, "password": password, **(more or {})}
    quoted = " ".join(f'{k}="{_jaas_quoted(v)}"' for k, v in options.items())
    return f"{_LOGIN_MODULES[mechanism]} required {quoted};"


def _jaas_quoted(value: str) -> str:
    """A value inside a JAAS option's double quotes."""
    return value.replace("\\", "\\\\").replace('"', '\\"')
