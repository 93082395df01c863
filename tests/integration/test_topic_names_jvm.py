"""The JVM twin of the topic names (router.naming.TopicNames, with which the decision names each
message's destination topic, `d_topic`) names exactly as streaming/topics.py does, byte for byte.

Every input is a (name, database, service) triple; each is named by `escape` and, under every
(prefix, instance) of PLACES, by `network` and `queue` (EXAMPLES of ROWS_PER_EXAMPLE generated
triples, and the hard cases), and compared with the Python functions. PLACES reach the limits: a
prefix of the longest allowed length and an instance cut at MAX_PART leave a queue 30 characters
for its database and service, so names around that length cross the 249-character cut; a prefix
of 120 with `_`, `.` and `-` and an escaped instance leave 103.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

from streaming import topics

pytestmark = pytest.mark.integration

PLACES = [
    (topics.DEFAULT_PREFIX, "i1"),
    ("p" * topics.MAX_PREFIX, "i" * 100),
    ("acme_prod.router-" * 7 + "x", "Instance/é"),
]
ROWS_PER_EXAMPLE = 100
EXAMPLES = 5

Triple = tuple[str | None, str | None, str | None]

names = st.one_of(
    st.text(max_size=30),
    st.text(min_size=40, max_size=90),
    st.text(alphabet="aZ9 +*-._~%/\n\x00é中😀", max_size=70),
    st.text(alphabet="abcXYZ0189", max_size=70),
)


def spelled(length: int, unit: str) -> str:
    """A name whose escaped form is `length` characters long: `unit`s, then `a`s to fill up."""
    width = len(topics.escape(unit))
    return unit * (length // width) + "a" * (length % width)


def hard_cases() -> list[Triple]:
    """Names at and around every cut-off, bytes that the SQL escaping treats apart, multi-byte UTF-8,
    and null parts (a null part gives a null name)."""
    odd = [
        *["", " ", "+", "*", "-", ".", "_", "~", "%", "%41", "%af", "AF", "a+b c", "100%"],
        *["ab\n", "\n", "\r\n", "\t", "\x7f", "\x00", "ÿ", "\u00ad", "\uffff", "\U0010ffff", "ß", "中文"],
        *["tcp://Far.Example:4022/", "plain", "ABC123", "-net", "queue"],
    ]
    units = ["a", "é", "-", "中", "😀", "\x00"]
    # Escaped lengths around MAX_PART (60), and multi-byte characters astride its head's end (42).
    parts = [spelled(n, unit) for n in range(57, 64) for unit in units]
    parts += ["a" * k + "é" * 10 for k in range(36, 44)]
    cases: list[Triple] = [(name, name, "S") for name in odd + parts]
    # Queue topics laid out at 248 to 251 characters under each place, cut from 250 on; the cut
    # (at 231) falls on plain characters or inside an escape.
    for prefix, instance in PLACES:
        room = topics.MAX_TOPIC - len(f"{prefix}.{topics.escape(instance)}.queue..")
        for total in range(room - 1, room + 3):
            if total > 2 * topics.MAX_PART:
                continue
            database = total // 2
            for unit in units:
                cases.append((unit, spelled(database, unit), spelled(total - database, unit)))
                cases.append((unit, spelled(database, "a"), spelled(total - database, unit)))
    return [*cases, (None, None, "S"), ("n", "D", None)]


def mismatches(spark: SparkSession, triples: Sequence[Triple]) -> list[str]:
    """Name every triple in the JVM; return how each differs from streaming.topics."""
    jvm = spark._jvm
    assert jvm is not None
    names = jvm.router.naming.TopicNames
    wrong = []
    for name, database, service in triples:
        got = [names.escape(name)]
        expected = [None if name is None else topics.escape(name)]
        for prefix, instance in PLACES:
            got += [names.network(name, prefix), names.queue(instance, database, service, prefix)]
            expected += [
                None if name is None else topics.network_topic(name, prefix),
                None
                if database is None or service is None
                else topics.queue_topic(instance, database, service, prefix),
            ]
        for i, (have, want) in enumerate(zip(got, expected, strict=True)):
            if have != want:
                wrong.append(f"name {i} of {(name, database, service)!r}: JVM {have!r}, Python {want!r}")
    return wrong


def test_the_hard_cases_are_named_alike(spark: SparkSession) -> None:
    cases = hard_cases()
    queues = [
        topics.queue_topic(i, d, s, p)
        for _, d, s in cases
        if d is not None and s is not None
        for p, i in PLACES
    ]
    assert any(name is None for name, _, _ in cases)
    # The cases do reach the cut: some queue names are laid out uncut at 249, some cut.
    assert any(len(q) == 249 and q[-18:-16] != topics.TOPIC_CUT_MARK for q in queues)
    assert any(q[-18:-16] == topics.TOPIC_CUT_MARK for q in queues)
    assert mismatches(spark, cases) == []


@settings(
    derandomize=True,  # the same examples in every run, as the engine's agreement test
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(drawn=st.lists(names, min_size=ROWS_PER_EXAMPLE, max_size=ROWS_PER_EXAMPLE))
def test_generated_names_are_named_alike(spark: SparkSession, drawn: list[str]) -> None:
    # Each name is a row's name, the next row's database and the one after's service.
    triples = list(zip(drawn, drawn[1:] + drawn[:1], drawn[2:] + drawn[:2], strict=True))
    assert mismatches(spark, triples) == []
