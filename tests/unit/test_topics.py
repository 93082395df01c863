"""The topic naming scheme (streaming/topics.py): distinct destinations never share a topic, and every
name is one Kafka accepts.

Kafka's rules: a topic name is 1 to 249 characters of [a-zA-Z0-9._-], not "." or "..", and two
topics that differ only by `.` versus `_` cannot both exist (their metric names would collide: the
broker refuses the second one). So the scheme must stay injective even after `.` -> `_`.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from hypothesis import example, given
from hypothesis import strategies as st

from streaming import topics

LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
PREFIXES = (topics.DEFAULT_PREFIX, "r", "acme-prod.router")
PER_INSTANCE = ("outbound", "inbound", "delayed", "dropped", "deadletter")

# Names as users write them (any Unicode, long ones), plus short ones built from the characters and
# words that the scheme itself uses, where collisions would hide.
names = st.one_of(
    st.text(max_size=120),
    st.text(alphabet="ab2ecf._-~ é", max_size=10),
    st.sampled_from(["net", "queue", "routes", "catalogs", *PER_INSTANCE]),
)

Destination = tuple[str, ...]
destinations: st.SearchStrategy[Destination] = st.one_of(
    st.just(("routes",)),
    st.just(("catalogs",)),
    st.tuples(st.sampled_from(PER_INSTANCE), names),
    st.tuples(st.just("queue"), names, names, names),
    st.tuples(st.just("net"), names),
)


def topic_of(destination: Destination, prefix: str = topics.DEFAULT_PREFIX) -> str:
    kind, *parts = destination
    make: dict[str, Callable[..., str]] = {
        "routes": topics.routes_topic,
        "catalogs": topics.catalogs_topic,
        "outbound": topics.outbound_topic,
        "inbound": topics.inbound_topic,
        "delayed": topics.delayed_topic,
        "dropped": topics.dropped_topic,
        "deadletter": topics.deadletter_topic,
        "queue": topics.queue_topic,
        "net": topics.network_topic,
    }
    return make[kind](*parts, prefix=prefix)


def kafka_collision_key(topic: str) -> str:
    """Kafka refuses a topic whose name equals an existing one's after this mapping."""
    return topic.replace(".", "_")


@given(st.lists(names, unique=True, max_size=30))
@example(["a" * 200, "a" * 201])
def test_escape_is_injective(parts: list[str]) -> None:
    assert len({topics.escape(part) for part in parts}) == len(parts)


@given(names)
@example("x" * 500)
@example("é" * 100)
def test_escaped_part_is_legal_and_short(part: str) -> None:
    escaped = topics.escape(part)
    assert LEGAL_TOPIC.fullmatch(escaped), escaped
    assert "." not in escaped  # a part never reads as a separator
    assert len(escaped) <= topics.MAX_PART


@given(destinations, st.sampled_from(PREFIXES))
@example(("queue", "i" * 300, "d" * 300, "s" * 300), topics.DEFAULT_PREFIX)
def test_every_topic_name_is_legal(destination: Destination, prefix: str) -> None:
    topic = topic_of(destination, prefix)
    assert LEGAL_TOPIC.fullmatch(topic), topic
    assert topic not in {".", ".."}


@given(st.lists(destinations, unique=True, max_size=40))
@example([("inbound", "net"), ("net", "inbound")])
@example([("queue", "i", "ab", "2ec."), ("queue", "i", "ab.c", "2e")])
def test_distinct_destinations_get_distinct_topics(dests: list[Destination]) -> None:
    names_ = [topic_of(destination) for destination in dests]
    assert len(set(names_)) == len(dests), sorted(names_)
    assert len({kafka_collision_key(name) for name in names_}) == len(dests), sorted(names_)
