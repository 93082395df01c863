"""The topic naming scheme: every destination has its own topic, inside the router's namespace.

This module is the one home of topic names; `router.naming.TopicNames` (jvm/state) is its JVM twin,
tested against it.

    {prefix}.routes                          compacted: route tables (key instance/scope/name, tombstone)
    {prefix}.catalogs                        compacted: instance catalogs (key instance name)
    {prefix}.mirrors                         compacted: mirror partner roles (key normalized address)
    {prefix}.{instance}.outbound             messages sent by the instance's own services
    {prefix}.{instance}.inbound              messages arriving from other instances (origin remote)
    {prefix}.{instance}.queue.{db}.{service} a local service queue (deliver)
    {prefix}.-net.{address}                  a network address no known instance answers to
    {prefix}.{instance}.delayed              delayed messages, Kafka timestamp = when delayed (LogAppendTime)
    {prefix}.{instance}.choices              compacted: route choices the router's decisions made (K2)
    {prefix}.{instance}.requests             compacted: MissingRoute requests sent and ended (B4)
    {prefix}.{instance}.dropped              dropped and discarded messages with their reason
    {prefix}.{instance}.deadletter           records that could not be decoded, with the error
    {prefix}.{instance}.redrives             compacted: how often `router redrive` sent each message back

and one consumer group per instance, `{prefix}.{instance}.router`: the offsets its router has read
up to (`streaming.kafka.progress_group`), for Kafka's tools to show its lag; `router redrive`
reads with a group of its own, `{prefix}.{instance}.redrive`.

A message sent or forwarded to the address of a known instance goes to that instance's inbound topic.

**Parts.** Names taken from instances, databases, services and addresses are escaped so that no two
distinct names map to one topic: every byte of the name's UTF-8 outside [A-Za-z0-9] becomes `-` and
two lowercase hex digits (`-` itself too, `_`, and `.`, the separator); the empty name becomes `-`.
So a generated part never holds `_` or `.`, and Kafka's folding of `.` and `_` (they collide in its
metric names) cannot make two topics collide. A part longer than `MAX_PART` is cut: its first
characters, then `-h` and `HASH_DIGITS` hex digits of the SHA-256 of the whole name. `-h` never
occurs in an escaped name, so a cut part cannot equal an uncut one. No part starts with `-n`, so
the `-net` namespace of network topics is apart from every instance's.

**Whole names.** Kafka refuses a topic name longer than `MAX_TOPIC` (249) characters. A name laid
out as above that is longer (only a queue topic can be, with three long parts) is cut as a whole:
its first `MAX_TOPIC - 18` characters, then `-t` and `HASH_DIGITS` hex digits of the SHA-256 of the
whole laid-out name, `MAX_TOPIC` characters in all. `-t` never occurs after the prefix of a name
that is not cut, so a cut name cannot equal an uncut one; two cut names are told apart by their
hashes, as cut parts are. Names of `MAX_TOPIC` characters or fewer are exactly what the layout
gives, so topics named by earlier versions keep their names.

**The prefix** is the operator's namespace and is not escaped: 1 to `MAX_PREFIX` (150) characters of
[A-Za-z0-9._-], Kafka's own topic characters (`check_prefix`). The bound leaves room in a cut name
for its whole `{prefix}.{instance}.queue.` (at most 150 + 68 characters) and at least 13 characters
of the database and service parts before the hash: a cut name still says whose queue it is, and
every other kind of topic fits uncut (at most 150 + 72 characters). Every function here refuses
another prefix with a ConfigError. Names are distinct for one prefix; two deployments whose prefixes
differ only by `.` and `_` share Kafka's metric names and should not share a cluster.
"""

from __future__ import annotations

import hashlib
import re

from streaming.contract import (
    HASH_DIGITS,
    INSTANCE_TOPIC_KINDS,
    MAX_PART,
    MAX_PREFIX,
    MAX_TOPIC,
    NETWORK_PART,
    PART_CUT_MARK,
    QUEUE_PART,
    TOPIC_CUT_MARK,
)
from streaming.errors import ConfigError

DEFAULT_PREFIX = "router"
# The naming's constants are the contract's (`streaming.contract`, shared with the JVM twin):
# MAX_TOPIC, Kafka's longest name; MAX_PART, the longest escaped part (a longer one is cut and
# hashed); MAX_PREFIX, the longest prefix (see the module docstring for why); HASH_DIGITS, the hex
# digits of SHA-256 that end a cut part or name; PART_CUT_MARK and TOPIC_CUT_MARK, what separates a
# cut part's or a cut name's head from its hash.

_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_PREFIX_CHARACTERS = re.compile(r"[A-Za-z0-9._-]+")


def check_prefix(prefix: str) -> str:
    """Return `prefix` if topics can be named under it, else raise ConfigError saying why.

    A prefix is 1 to MAX_PREFIX characters of [A-Za-z0-9._-] (see the module docstring).
    """
    expected = f"expected a topic prefix of 1 to {MAX_PREFIX} characters of [A-Za-z0-9._-]"
    if not prefix:
        raise ConfigError(f"{expected}, got an empty one")
    if not _PREFIX_CHARACTERS.fullmatch(prefix):
        illegal = "".join(sorted({c for c in prefix if not _PREFIX_CHARACTERS.fullmatch(c)}))
        raise ConfigError(f"{expected} (Kafka's topic characters), got {prefix!r}, which holds {illegal!r}")
    if len(prefix) > MAX_PREFIX:
        raise ConfigError(
            f"{expected} (the rest of a topic name needs the other {MAX_TOPIC - MAX_PREFIX} of Kafka's "
            f"{MAX_TOPIC}), got {prefix!r}, {len(prefix)} characters long"
        )
    return prefix


def _hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:HASH_DIGITS]


def escape(part: str) -> str:
    """Escape one name into topic-safe characters, injectively (see the module docstring)."""
    out = "".join(chr(b) if b in _SAFE else f"-{b:02x}" for b in part.encode("utf-8"))
    if len(out) > MAX_PART:
        out = out[: MAX_PART - len(PART_CUT_MARK) - HASH_DIGITS] + PART_CUT_MARK + _hash(part.encode("utf-8"))
    return out or "-"


def _topic(prefix: str, *parts: str) -> str:
    """The name of the topic `{prefix}.{part}.{part}...`, cut as a whole when Kafka would refuse it."""
    name = ".".join((check_prefix(prefix), *parts))
    if len(name) <= MAX_TOPIC:
        return name
    head = name[: MAX_TOPIC - len(TOPIC_CUT_MARK) - HASH_DIGITS]
    return head + TOPIC_CUT_MARK + _hash(name.encode("ascii"))


def routes_topic(prefix: str = DEFAULT_PREFIX) -> str:
    """The compacted topic of every route table."""
    return _topic(prefix, "routes")


def catalogs_topic(prefix: str = DEFAULT_PREFIX) -> str:
    """The compacted topic of instance catalogs."""
    return _topic(prefix, "catalogs")


def mirrors_topic(prefix: str = DEFAULT_PREFIX) -> str:
    """The compacted topic of mirror partner roles: key the normalized address, value the role."""
    return _topic(prefix, "mirrors")


def outbound_topic(instance: str, prefix: str = DEFAULT_PREFIX) -> str:
    """Messages the instance's own services send."""
    return _topic(prefix, escape(instance), "outbound")


def inbound_topic(instance: str, prefix: str = DEFAULT_PREFIX) -> str:
    """Messages arriving at the instance from other instances."""
    return _topic(prefix, escape(instance), "inbound")


def queue_topic(instance: str, database: str, service: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The queue of a service hosted by one of the instance's databases."""
    return _topic(prefix, escape(instance), QUEUE_PART, escape(database), escape(service))


def network_topic(normalized_address: str, prefix: str = DEFAULT_PREFIX) -> str:
    """Messages for a network address that no known instance answers to."""
    return _topic(prefix, NETWORK_PART, escape(normalized_address))


def delayed_topic(instance: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The instance's delayed messages, each due retry_s after it was written."""
    return _topic(prefix, escape(instance), "delayed")


def choices_topic(instance: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The route choices the instance's router made for conversations (K2), read back by it."""
    return _topic(prefix, escape(instance), "choices")


def requests_topic(instance: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The MissingRoute requests the instance's router sent and saw end (B4), read back by it."""
    return _topic(prefix, escape(instance), "requests")


def dropped_topic(instance: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The instance's dropped and discarded messages, with the reason."""
    return _topic(prefix, escape(instance), "dropped")


def deadletter_topic(instance: str, prefix: str = DEFAULT_PREFIX) -> str:
    """Records the instance could not decode, with the error."""
    return _topic(prefix, escape(instance), "deadletter")


def router_group(instance: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The consumer group the instance's router writes its progress to (`streaming.kafka.progress_group`)."""
    return _topic(prefix, escape(instance), "router")


def redrives_topic(instance: str, prefix: str = DEFAULT_PREFIX) -> str:
    """How many times `router redrive` sent each of the instance's messages back (compacted, by id)."""
    return _topic(prefix, escape(instance), "redrives")


def redrive_group(instance: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The group `router redrive` commits its progress to, with what it writes (`streaming.redrive`)."""
    return _topic(prefix, escape(instance), "redrive")


_ESCAPED = re.compile(r"(?:[A-Za-z0-9]|-[0-9a-f]{2})+")


def instance_topic_parts(name: str) -> tuple[str, str, str] | None:
    """The prefix, instance and kind of an instance's own topic (`{prefix}.{instance}.{kind}`).

    The kind is one of `INSTANCE_TOPIC_KINDS`; any other name gives None. The instance comes back
    unescaped; a part cut for its length (`MAX_PART`) keeps only a hash of its end, and comes back
    as the name holds it.
    """
    pieces = name.rsplit(".", 2)
    if len(pieces) != 3 or pieces[2] not in INSTANCE_TOPIC_KINDS:
        return None
    if not _PREFIX_CHARACTERS.fullmatch(pieces[0]):
        return None
    prefix, part, kind = pieces
    if part == "-":
        return prefix, "", kind
    if not _ESCAPED.fullmatch(part):
        return prefix, part, kind
    raw = bytearray()
    i = 0
    while i < len(part):
        if part[i] == "-":
            raw.append(int(part[i + 1 : i + 3], 16))
            i += 3
        else:
            raw.append(ord(part[i]))
            i += 1
    try:
        return prefix, raw.decode("utf-8"), kind
    except UnicodeDecodeError:
        return prefix, part, kind
