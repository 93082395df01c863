"""Destination topic names as Spark SQL: the twins of `streaming.topics`, equal byte for byte.

The streaming job names each record's destination inside the query, so the names are Column
expressions: the variable parts (database, service, address) are Columns, the fixed parts (prefix,
instance) Python strings that become literals. A null part gives a null name. The instance's own
topics (inbound, delayed, dropped, deadletter) are fixed per instance: take them from
`streaming.topics` as literals.

Cost: a name made only of [A-Za-z0-9] is checked with one regular expression and passes through
unchanged (hashed only when longer than MAX_PART). Only other names are escaped byte by byte, with
`url_encode` (Java's URLEncoder, which already writes every byte outside [A-Za-z0-9.*_-] as `%XY`)
and a few regular expressions that turn its output into the scheme's, and are hashed in case the
escaped form needs a cut. A whole name is hashed only when it is cut. Every expression here is
code-generated; none is a higher-order function. Build the Columns once and reuse them: each one
is a few dozen calls into the JVM.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from streaming.topics import (
    DEFAULT_PREFIX,
    HASH_DIGITS,
    MAX_PART,
    MAX_TOPIC,
    PART_CUT_MARK,
    TOPIC_CUT_MARK,
    check_prefix,
    escape,
)

# `\z`, not `$`: Java's `$` also matches before a final line break, so "ab\n" would pass as plain.
_PLAIN = r"\A[A-Za-z0-9]+\z"
# What URLEncoder leaves as it is, or writes as `+`, and the scheme escapes.
_URL_KEPT = ((r"-", "%2d"), (r"\.", "%2e"), (r"\*", "%2a"), ("_", "%5f"), (r"\+", "%20"))


def _hash_sql(data: Column) -> Column:
    """The first HASH_DIGITS hex digits of the SHA-256 of the string's UTF-8 bytes."""
    return F.substring(F.sha2(data.cast("binary"), 256), 1, HASH_DIGITS)


def _escape_bytes_sql(part: Column) -> Column:
    """Every UTF-8 byte outside [A-Za-z0-9] as `-` and two lowercase hex digits, uncut."""
    escaped = F.url_encode(part)
    for kept, code in _URL_KEPT:
        escaped = F.regexp_replace(escaped, kept, code)
    # URLEncoder's hex digits are capitals: lower the letters that follow `%` or `%` and a hex digit,
    # which are exactly the escapes' digits (a `%` of the name itself is escaped as `%25`).
    for letter in "ABCDEF":
        escaped = F.regexp_replace(escaped, rf"(?<=%[0-9A-Fa-f]?){letter}", letter.lower())
    return F.translate(escaped, "%", "-")


def escape_sql(part: Column) -> Column:
    """`streaming.topics.escape` of a string Column."""
    head = MAX_PART - len(PART_CUT_MARK) - HASH_DIGITS
    hashed = _hash_sql(part)
    plain = F.when(
        F.length(part) > MAX_PART, F.concat(F.substring(part, 1, head), F.lit(PART_CUT_MARK), hashed)
    )
    # The escaping is a long expression: it is cut by one regular expression rather than a CASE
    # that would repeat it, since the plan's size is what Spark analyzes and compiles every batch.
    escaped = F.regexp_replace(
        _escape_bytes_sql(part),
        rf"\A(.{{{head}}}).{{{MAX_PART - head + 1},}}\z",
        F.concat(F.lit("$1" + PART_CUT_MARK), hashed),
    )
    return F.when(part.rlike(_PLAIN), plain.otherwise(part)).when(part == "", F.lit("-")).otherwise(escaped)


def _topic_sql(prefix: str, *parts: Column | str) -> Column:
    """`{prefix}.{part}...` cut as a whole past MAX_TOPIC, as `streaming.topics` does."""
    pieces: list[Column] = [F.lit(check_prefix(prefix))]
    for part in parts:
        # concat, not concat_ws: concat_ws would skip a null part instead of giving a null name.
        pieces += [F.lit("."), F.lit(part) if isinstance(part, str) else part]
    name = F.concat(*pieces)
    head = MAX_TOPIC - len(TOPIC_CUT_MARK) - HASH_DIGITS
    cut = F.concat(F.substring(name, 1, head), F.lit(TOPIC_CUT_MARK), _hash_sql(name))
    return F.when(F.length(name) <= MAX_TOPIC, name).otherwise(cut)


def queue_topic_sql(instance: str, database: Column, service: Column, prefix: str = DEFAULT_PREFIX) -> Column:
    """`streaming.topics.queue_topic` with the database and service as Columns."""
    return _topic_sql(prefix, escape(instance), "queue", escape_sql(database), escape_sql(service))


def network_topic_sql(normalized_address: Column, prefix: str = DEFAULT_PREFIX) -> Column:
    """`streaming.topics.network_topic` with the normalized address as a Column."""
    return _topic_sql(prefix, "-net", escape_sql(normalized_address))
