"""The topic naming scheme (streaming/topics.py): distinct destinations never share a topic, and every
name is one Kafka accepts.

Kafka's rules: a topic name is 1 to 249 characters of [a-zA-Z0-9._-], not "." or "..", and two
topics that differ only by `.` versus `_` cannot both exist (their metric names would collide: the
broker refuses the second one). So the scheme must stay injective even after `.` -> `_`.

Names that fit in 249 characters must stay what earlier versions named them (their topics exist):
`LAYOUT` below is that layout, and `TODAY` pins some of its names letter for letter.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from streaming import topics
from streaming.errors import ConfigError

LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")
LEGAL_PREFIX = re.compile(r"[a-zA-Z0-9._-]{1,150}")
LONGEST_PREFIX = "p" * topics.MAX_PREFIX
PREFIXES = (topics.DEFAULT_PREFIX, "r", "acme-prod.router", "a_b", "-", "..", LONGEST_PREFIX)
PER_INSTANCE = ("outbound", "inbound", "delayed", "choices", "requests", "dropped", "deadletter", "redrives")
FIXED = ("routes", "catalogs", "mirrors")

# Names as users write them (any Unicode, control characters, very long ones), plus short ones built
# from the characters and words that the scheme itself uses, where collisions would hide.
names = st.one_of(
    st.text(max_size=120),
    st.text(min_size=100, max_size=300),
    st.text(alphabet="ab2ecfhnt._-/~ é\x00\n", max_size=10),
    st.sampled_from(["", "net", "-net", "queue", *FIXED, *PER_INSTANCE]),
)
prefixes = st.one_of(
    st.sampled_from(PREFIXES),
    st.text(alphabet="abcXYZ019._-", min_size=1, max_size=topics.MAX_PREFIX),
    st.integers(100, topics.MAX_PREFIX).map(lambda n: "x" * n),
)

Destination = tuple[str, ...]
destinations: st.SearchStrategy[Destination] = st.one_of(
    st.sampled_from([(kind,) for kind in FIXED]),
    st.tuples(st.sampled_from(PER_INSTANCE), names),
    st.tuples(st.just("queue"), names, names, names),
    st.tuples(st.just("net"), names),
)

MAKE: dict[str, Callable[..., str]] = {
    "routes": topics.routes_topic,
    "catalogs": topics.catalogs_topic,
    "mirrors": topics.mirrors_topic,
    "outbound": topics.outbound_topic,
    "inbound": topics.inbound_topic,
    "delayed": topics.delayed_topic,
    "choices": topics.choices_topic,
    "requests": topics.requests_topic,
    "dropped": topics.dropped_topic,
    "deadletter": topics.deadletter_topic,
    "redrives": topics.redrives_topic,
    "queue": topics.queue_topic,
    "net": topics.network_topic,
}
# The names as earlier versions laid them out (the table of docs/topics.md), before any cut of the whole.
LAYOUT = {
    **{kind: "{p}." + kind for kind in FIXED},
    **{kind: "{p}.{0}." + kind for kind in PER_INSTANCE},
    "queue": "{p}.{0}.queue.{1}.{2}",
    "net": "{p}.-net.{0}",
}
# Names earlier versions gave, letter for letter: they must not change.
TODAY = [
    (("queue", "i1", "AW", "Audit Service"), "router", "router.i1.queue.AW.Audit-20Service"),
    (
        ("queue", "i1", "AW", "//Adventure-Works.com/Orders_Svc"),
        "router",
        "router.i1.queue.AW.-2f-2fAdventure-2dWorks-2ecom-2fOrders-5fSvc",
    ),
    (("net", "tcp://far.example:4022"), "router", "router.-net.tcp-3a-2f-2ffar-2eexample-3a4022"),
    (("net", "x" * 61), "router", "router.-net.xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx-hc508e75f24e25db9"),
    (("inbound", ""), "router", "router.-.inbound"),
    (("delayed", "ï"), "router", "router.-c3-af.delayed"),
    (("deadletter", "i.2_3"), "r", "r.i-2e2-5f3.deadletter"),
    (("routes",), "router", "router.routes"),
    (("mirrors",), "acme", "acme.mirrors"),
    (
        ("queue", "i1", "D" * 100, "é" * 30),
        "acme-prod.router",
        "acme-prod.router.i1.queue.DDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDDD-h407c28e1d51f887a."
        "-c3-a9-c3-a9-c3-a9-c3-a9-c3-a9-c3-a9-c3-a9-hf96161c7582c75df",
    ),
    # Exactly Kafka's 249 characters: three cut parts under a prefix of 60. It stays as it is.
    (
        ("queue", "i" * 100, "d" * 100, "s" * 100),
        "p" * 60,
        "p" * 60 + ".iiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiii-h2fdbbb78c5344276.queue."
        "dddddddddddddddddddddddddddddddddddddddddd-h9917c7f497a72a84."
        "ssssssssssssssssssssssssssssssssssssssssss-h4f4315674f2f1f05",
    ),
]


def topic_of(destination: Destination, prefix: str = topics.DEFAULT_PREFIX) -> str:
    kind, *parts = destination
    return MAKE[kind](*parts, prefix=prefix)


def laid_out(destination: Destination, prefix: str) -> str:
    kind, *parts = destination
    return LAYOUT[kind].format(*[topics.escape(part) for part in parts], p=prefix)


def kafka_collision_key(topic: str) -> str:
    """Kafka refuses a topic whose name equals an existing one's after this mapping."""
    return topic.replace(".", "_")


def test_every_kind_of_topic_is_tested() -> None:
    assert set(MAKE) == set(LAYOUT)
    public = [name for name in dir(topics) if not name.startswith("_")]
    named = {name.removesuffix("_topic") for name in public if name.endswith("_topic")}
    assert named == set(MAKE) - {"net"} | {"network"}


@pytest.mark.parametrize(("destination", "prefix", "name"), TODAY)
def test_names_that_fit_are_what_they_were(destination: Destination, prefix: str, name: str) -> None:
    assert topic_of(destination, prefix) == name
    assert laid_out(destination, prefix) == name


@given(st.lists(names, unique=True, max_size=30))
@example(["a" * 200, "a" * 201])
def test_escape_is_injective(parts: list[str]) -> None:
    assert len({topics.escape(part) for part in parts}) == len(parts)


@given(names)
@example("x" * 500)
@example("é" * 100)
@example("\x00")
def test_escaped_part_is_legal_and_short(part: str) -> None:
    escaped = topics.escape(part)
    assert LEGAL_TOPIC.fullmatch(escaped), escaped
    assert "." not in escaped  # a part never reads as a separator
    assert "_" not in escaped
    assert not escaped.startswith("-n")  # the `-net` namespace is apart
    assert len(escaped) <= topics.MAX_PART


@given(destinations, prefixes)
@example(("queue", "i" * 300, "d" * 300, "s" * 300), LONGEST_PREFIX)
@example(("deadletter", "é" * 300), LONGEST_PREFIX)
@example(("net", "/" * 300), LONGEST_PREFIX)
@example(("queue", "i", "d" * 101, "s"), "p" * 120)  # a laid-out name of 251 characters, before the cut
def test_every_topic_name_is_legal(destination: Destination, prefix: str) -> None:
    topic = topic_of(destination, prefix)
    assert LEGAL_TOPIC.fullmatch(topic), topic
    assert topic not in {".", ".."}
    assert topic.startswith(prefix + ".")
    rest = topic[len(prefix) + 1 :]
    assert "_" not in rest
    assert rest.startswith("-net.") == (destination[0] == "net")


@given(destinations, prefixes)
@example(("queue", "i" * 60, "d" * 60, "s" * 59), "p" * 61)  # 249 laid out: not cut
@example(("queue", "i" * 60, "d" * 60, "s" * 60), "p" * 61)  # 250 laid out: cut
def test_a_name_is_laid_out_unless_too_long_then_cut_with_a_hash_of_the_whole(
    destination: Destination, prefix: str
) -> None:
    full = laid_out(destination, prefix)
    topic = topic_of(destination, prefix)
    if len(full) <= topics.MAX_TOPIC:
        assert topic == full
        return
    assert destination[0] == "queue"  # every other kind fits under any legal prefix
    digest = hashlib.sha256(full.encode()).hexdigest()[:16]
    assert topic == full[:231] + "-t" + digest
    assert len(topic) == topics.MAX_TOPIC


@given(names, names, names)
def test_a_cut_name_still_says_whose_queue_it_is(instance: str, database: str, service: str) -> None:
    topic = topics.queue_topic(instance, database, service, LONGEST_PREFIX)
    head = f"{LONGEST_PREFIX}.{topics.escape(instance)}.queue."
    assert topic.startswith(head)
    if len(topic) == topics.MAX_TOPIC and topic[-18:-16] == "-t":
        assert len(topic) - 18 - len(head) >= 13


@given(st.lists(destinations, unique=True, max_size=40), prefixes)
@example([("inbound", "net"), ("net", "inbound")], topics.DEFAULT_PREFIX)
@example([("queue", "i", "ab", "2ec."), ("queue", "i", "ab.c", "2e")], topics.DEFAULT_PREFIX)
# Cut names whose heads are equal: only the hash of the whole tells them apart.
@example([("queue", "i" * 99, "d" * 99, "s1"), ("queue", "i" * 99, "d" * 99, "s2")], LONGEST_PREFIX)
@example([("queue", "i" * 99, "d" * 99, "s" * 99), ("queue", "i" * 99, "d" * 98, "s" * 99)], LONGEST_PREFIX)
# A name of 249 laid out (not cut) beside ones of 250 (cut) that share its head.
@example(
    [("queue", "i" * 60, "d" * 60, "s" * 59), ("queue", "i" * 60, "d" * 60, "s" * 60)],
    "p" * 61,
)
def test_distinct_destinations_get_distinct_topics(dests: list[Destination], prefix: str) -> None:
    names_ = [topic_of(destination, prefix) for destination in dests]
    assert len(set(names_)) == len(dests), sorted(names_)
    assert len({kafka_collision_key(name) for name in names_}) == len(dests), sorted(names_)


@given(st.text(max_size=200))
@example("")
@example("a b")
@example("router\n")
@example("x" * 150)
@example("x" * 151)
def test_a_prefix_is_1_to_150_of_kafkas_characters(prefix: str) -> None:
    if LEGAL_PREFIX.fullmatch(prefix):
        assert topics.check_prefix(prefix) == prefix
    else:
        with pytest.raises(ConfigError, match=r"expected a topic prefix of 1 to 150 characters of"):
            topics.check_prefix(prefix)


@pytest.mark.parametrize(
    ("prefix", "says"),
    [
        ("", "got an empty one"),
        ("my router", r"got 'my router', which holds ' '"),
        ("röuter/x", r"which holds '/ö'"),
        ("x" * 151, r"the other 99 of Kafka's 249\), got 'x+', 151 characters long"),
    ],
)
def test_a_refused_prefix_says_what_was_expected_and_what_arrived(prefix: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        topics.check_prefix(prefix)


@pytest.mark.parametrize("kind", sorted(MAKE))
def test_every_topic_function_refuses_a_bad_prefix(kind: str) -> None:
    destination = (kind, *["x"] * (LAYOUT[kind].count("{") - 1))
    with pytest.raises(ConfigError, match="expected a topic prefix"):
        topic_of(destination, "bad prefix")
    with pytest.raises(ConfigError, match="151 characters long"):
        topic_of(destination, "x" * 151)


@given(st.text(max_size=30), st.sampled_from(topics.INSTANCE_TOPIC_KINDS))
def test_an_instance_topic_names_its_prefix_instance_and_kind(instance: str, kind: str) -> None:
    part = topics.escape(instance)
    name = topics._topic("my.pre_fix", part, kind)
    # A part cut for its length keeps a hash of its end only: it comes back as the name holds it.
    expected = part if topics.PART_CUT_MARK in part else instance
    assert topics.instance_topic_parts(name) == ("my.pre_fix", expected, kind)


def test_other_topics_are_no_instance_topics() -> None:
    assert topics.instance_topic_parts(topics.routes_topic("router")) is None
    assert topics.instance_topic_parts(topics.queue_topic("i1", "AW", "S", "router")) is None
    assert topics.instance_topic_parts(topics.network_topic("tcp://x:1", "router")) is None
