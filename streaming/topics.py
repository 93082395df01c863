"""The topic naming scheme: every destination has its own topic, inside the router's namespace.

    {prefix}.routes                          compacted: route tables (key scope/name, drop = tombstone)
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

A message sent or forwarded to the address of a known instance goes to that instance's inbound topic.
Names taken from instances, databases, services and addresses are escaped so that no two distinct
names map to one topic: every byte outside [A-Za-z0-9] becomes `-` and two hex digits (`-` itself
too, `_`, and `.`, the separator). So a topic name never holds `_`, and Kafka's folding of `.` and
`_` (they collide in its metric names) cannot make two of them collide. A part longer than
`MAX_PART` is cut and ends with `-h` and 16 hex digits of the SHA-256 of the whole name: `-h` never
occurs in an escaped name, so a cut name cannot equal an uncut one. No escaped part starts with
`-n`, so the `-net` namespace of network topics is apart from every instance's.
"""

from __future__ import annotations

import hashlib

DEFAULT_PREFIX = "router"
MAX_PART = 60
_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")


def escape(part: str) -> str:
    """Escape one name into topic-safe characters, injectively (see the module docstring)."""
    out = "".join(chr(b) if b in _SAFE else f"-{b:02x}" for b in part.encode("utf-8"))
    if len(out) > MAX_PART:
        digest = hashlib.sha256(part.encode("utf-8")).hexdigest()[:16]
        out = f"{out[: MAX_PART - 18]}-h{digest}"
    return out or "-"


def routes_topic(prefix: str = DEFAULT_PREFIX) -> str:
    """The compacted topic of every route table."""
    return f"{prefix}.routes"


def catalogs_topic(prefix: str = DEFAULT_PREFIX) -> str:
    """The compacted topic of instance catalogs."""
    return f"{prefix}.catalogs"


def mirrors_topic(prefix: str = DEFAULT_PREFIX) -> str:
    """The compacted topic of mirror partner roles: key the normalized address, value the role."""
    return f"{prefix}.mirrors"


def outbound_topic(instance: str, prefix: str = DEFAULT_PREFIX) -> str:
    """Messages the instance's own services send."""
    return f"{prefix}.{escape(instance)}.outbound"


def inbound_topic(instance: str, prefix: str = DEFAULT_PREFIX) -> str:
    """Messages arriving at the instance from other instances."""
    return f"{prefix}.{escape(instance)}.inbound"


def queue_topic(instance: str, database: str, service: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The queue of a service hosted by one of the instance's databases."""
    return f"{prefix}.{escape(instance)}.queue.{escape(database)}.{escape(service)}"


def network_topic(normalized_address: str, prefix: str = DEFAULT_PREFIX) -> str:
    """Messages for a network address that no known instance answers to."""
    return f"{prefix}.-net.{escape(normalized_address)}"


def delayed_topic(instance: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The instance's delayed messages, each due retry_s after it was written."""
    return f"{prefix}.{escape(instance)}.delayed"


def choices_topic(instance: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The route choices the instance's router made for conversations (K2), read back by it."""
    return f"{prefix}.{escape(instance)}.choices"


def requests_topic(instance: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The MissingRoute requests the instance's router sent and saw end (B4), read back by it."""
    return f"{prefix}.{escape(instance)}.requests"


def dropped_topic(instance: str, prefix: str = DEFAULT_PREFIX) -> str:
    """The instance's dropped and discarded messages, with the reason."""
    return f"{prefix}.{escape(instance)}.dropped"


def deadletter_topic(instance: str, prefix: str = DEFAULT_PREFIX) -> str:
    """Records the instance could not decode, with the error."""
    return f"{prefix}.{escape(instance)}.deadletter"
