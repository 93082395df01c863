"""Destination topic names as Spark SQL: the twins of `streaming.topics`, equal byte for byte.

The streaming job names each record's destination inside the query, so the names are Column
expressions: the variable parts (database, service, address, and the instance of a query that
routes several) are Columns, the fixed parts (prefix, instance) Python strings that become
literals. A null part gives a null name. The instance's own topics (inbound, delayed, dropped,
deadletter) are fixed per instance: take them from `streaming.topics` (`Topology.topic_for`).

Each name is one call per message into the JVM twin of the naming, `router.naming.TopicNames`
(jvm/state, compiled by `make setup`), through Spark SQL's `java_method`: a method of a few dozen
byte operations, where the same naming written as SQL expressions took a chain of regular
expressions per message and made the batch's generated code too large to run fast. The tests hold
both to `streaming.topics` (tests/integration/test_topic_names_sql.py).
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from streaming.topics import DEFAULT_PREFIX, check_prefix

_CLASS = "router.naming.TopicNames"


def _call(method: str, *parts: Column) -> Column:
    """`TopicNames.method(parts...)`, null when a part is null (as the Python naming has no name)."""
    present = parts[0].isNotNull()
    for part in parts[1:]:
        present = present & part.isNotNull()
    called = F.call_function("java_method", F.lit(_CLASS), F.lit(method), *parts)
    return F.when(present, called)


def escape_sql(part: Column) -> Column:
    """`streaming.topics.escape` of a string Column."""
    return _call("escape", part)


def queue_topic_sql(
    instance: str | Column, database: Column, service: Column, prefix: str = DEFAULT_PREFIX
) -> Column:
    """`streaming.topics.queue_topic` with the database and service (and maybe the instance) as Columns."""
    named = F.lit(instance) if isinstance(instance, str) else instance
    return _call("queue", F.lit(check_prefix(prefix)), named, database, service)


def network_topic_sql(normalized_address: Column, prefix: str = DEFAULT_PREFIX) -> Column:
    """`streaming.topics.network_topic` with the normalized address as a Column."""
    return _call("network", F.lit(check_prefix(prefix)), normalized_address)
