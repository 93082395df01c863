"""The topic naming scheme of `streaming.topics`, as Spark SQL expressions.

`escape_sql(col)` is `streaming.topics.escape` byte for byte: every UTF-8 byte outside
[A-Za-z0-9] becomes `-` and two hex digits, and an escaped part longer than MAX_PART is cut and
ends with `-h` and 16 hex digits of the name's SHA-256. Tests hold the two equal.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from streaming.topics import MAX_PART


def escape_sql(col: Column) -> Column:
    """Escape one name column into topic-safe characters (see `streaming.topics.escape`)."""
    hexed = F.lower(F.hex(F.encode(col, "UTF-8")))
    count = F.length(hexed) / 2

    def piece(i: Column) -> Column:
        pair = F.substring(hexed, i * 2 + 1, 2)
        code = F.conv(pair, 16, 10).cast("int")
        safe = code.between(48, 57) | code.between(65, 90) | code.between(97, 122)
        return F.when(safe, F.decode(F.unhex(pair), "US-ASCII")).otherwise(F.concat(F.lit("-"), pair))

    escaped = F.when(
        count > 0,
        F.array_join(F.transform(F.sequence(F.lit(0), (count - 1).cast("int")), piece), ""),
    ).otherwise(F.lit("-"))
    digest = F.substring(F.sha2(F.encode(col, "UTF-8"), 256), 1, 16)
    return F.when(
        F.length(escaped) > MAX_PART,
        F.concat(F.substring(escaped, 1, MAX_PART - 18), F.lit("-h"), digest),
    ).otherwise(escaped)


def queue_topic_sql(prefix: str, instance_escaped: str, database: Column, service: Column) -> Column:
    """`streaming.topics.queue_topic` for columns; `instance_escaped` is already escaped."""
    return F.concat(
        F.lit(f"{prefix}.{instance_escaped}.queue."), escape_sql(database), F.lit("."), escape_sql(service)
    )


def network_topic_sql(prefix: str, normalized_address: Column) -> Column:
    """`streaming.topics.network_topic` for a column of normalized addresses."""
    return F.concat(F.lit(f"{prefix}.-net."), escape_sql(normalized_address))
