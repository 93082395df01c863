"""The words the Python half and the JVM half of the router share, declared once, here.

A decision crosses between Python and the JVM: Python builds the snapshot and the query, the JVM
decides each row (`router.rules`), keeps the conversation memory (`router.state`) and names the
destination topics (`router.naming`), its Spark adapters (`router.spark`) moving the rows in and
out, and Python reads the result back (the headers of a written record, the decision's columns,
the state's rows). Both halves must use the same words for it:

* the outcomes and the reasons of a decision (docs/rules.md, "The decision");
* the steps a decision names in its `match_step` and `choice_step` headers;
* the Kafka headers of a decided message, in the order they are written;
* the columns a decision adds to a row, and those the state processor reads and writes;
* the kinds of an instance's own topics, and the constants of topic naming (`streaming.topics`).

The JVM's copy, `router.contract.Contract` (jvm/state/src/router/contract/Contract.java), is
generated from this module by `scripts/contract_java.py`; a unit test
(tests/unit/test_contract.py) fails when the two differ, so a word is changed here, and the Java
file written again with `python scripts/contract_java.py`.
"""

from __future__ import annotations

from enum import Enum


class Outcome(str, Enum):
    """Where a routing decision sends a message (docs/rules.md §1.7)."""

    DELIVER = "deliver"
    SEND = "send"
    FORWARD = "forward"
    DELAYED = "delayed"
    DROPPED = "dropped"
    DISCARDED = "discarded"


class Reason(str, Enum):
    """Why a message was delayed, dropped or discarded (the `reason` header)."""

    NO_ROUTE = "no_route"
    ROUTE_REQUESTED = "route_requested"
    SERVICE_NOT_FOUND = "service_not_found"
    FORWARDING_DISABLED = "forwarding_disabled"
    HOPS_EXHAUSTED = "hops_exhausted"
    LIFETIME_EXPIRED = "lifetime_expired"
    FORWARD_BUFFER_FULL = "forward_buffer_full"
    PRINCIPAL_UNKNOWN = "principal_unknown"
    DESTINATION_UNAVAILABLE = "destination_unavailable"
    """Not a rule's: the router could not create or write the destination topic, so the message
    went to the dropped topic instead (`streaming.spark.output`)."""


MATCH_STEPS = ("S4", "M1", "M2", "M3", "M4", "M5", "M6", "M7")
"""The `match_step` of a decision: the reply shortcut (S4) or the matching step that ended (M1-M7)."""
CHOICE_STEPS = ("C1", "C2", "C3", "C4")
"""The `choice_step` of a decision: the tier its route was chosen from."""

MESSAGE_HEADERS = (
    "outcome",
    "route",
    "match_step",
    "choice_step",
    "reason",
    "database",
    "address",
    "scope",
    "requests",
    "snapshot_version",
    "decided_at",
    "router_instance",
    "due_at",
    "kept_bid",
    "kept_route_service",
    "kept_address",
)
"""The headers of a decided message, in order; one whose value is null is left out. `due_at` (when
it falls due, D2) and the `kept_*` ones (its conversation's kept choice, K2, read back with it) are
on delayed messages only."""

# --- the decision's columns ---------------------------------------------------------------------

CHOICE_IDENTITY_COLUMNS = ("k_bid", "k_route_service", "k_address")
"""K2: the C0 identity (broker instance or "", service or "", address) a decision keeps, or null."""
DECISION_COLUMNS = (
    "outcome",
    "d_database",
    "d_address",
    "d_route",
    "match_step",
    "choice_step",
    "reason",
    "requests",
    "d_hops_remaining",
    "d_scope",
    *CHOICE_IDENTITY_COLUMNS,
    "k_change",
    "d_topic",
    "d_snapshot",
    "d_decided_at",
    "d_headers",
)
"""What the decision adds to a row, in order (`router.spark.DecisionPass`, `streaming.spark.decision`)."""

# --- the state processor's columns --------------------------------------------------------------

STATE_KEY_COLUMN = "c_key"
"""The state's key of a row: its conversation endpoint."""
STATE_KIND_COLUMN = "c_kind"
"""What a row brings the state: one of `STATE_KINDS`' values."""
STATE_KINDS = {"message": 0, "choice": 1, "delayed": 2}
"""A message to decide, a kept choice read back (K2), a delayed message read back (D1)."""
ENTRY_COLUMNS = ("origin", "service")
"""K2: a kept choice's entry, the origin database and the target service."""
STATE_IDENTITY_COLUMNS = ("c_bid", "c_route_service", "c_address")
"""The identity a choice row brings the state (K2)."""
KEPT_COLUMNS = ("kept_bid", "kept_route_service", "kept_address")
"""The identity the message's conversation kept (K2), set by the state processor, or null."""
STATE_AT_COLUMN = "c_at_ms"
"""When a choice row's choice was made, or a delayed row's message was delayed."""
POSITION_COLUMN = "pos"
"""A row's place in its batch, which keeps a conversation's order through the state."""
ID_COLUMN = "id"
"""The message id: D1 holds a message once, however many copies of it are read back."""
WAITING_COLUMN = "waiting"
"""Set by the state: the message's conversation endpoint has delayed messages waiting (D1)."""
FIRST_COLUMN = "first_of_entry"
"""Set by the state: the message is the first of its entry in the batch to choose (K2)."""
BATCH_TIME_COLUMN = "batch_ms"
"""The micro-batch's time, the `now` of every decision in it."""
STATE_VARIABLE = "memory"
"""The name of the state variable that holds a key's memory (the state data source reads it)."""

# --- topics -------------------------------------------------------------------------------------

INSTANCE_TOPIC_KINDS = (
    "outbound",
    "inbound",
    "delayed",
    "choices",
    "requests",
    "dropped",
    "deadletter",
    "redrives",
)
"""The last part of each topic of an instance's own (`{prefix}.{instance}.{kind}`)."""
QUEUE_PART = "queue"
"""The part that names a local service's queue: `{prefix}.{instance}.queue.{database}.{service}`."""
NETWORK_PART = "-net"
"""The part of a network address's topic: `{prefix}.-net.{address}`."""
MAX_TOPIC = 249
"""Kafka's longest topic name."""
MAX_PART = 60
"""The longest escaped part; a longer one is cut and hashed."""
MAX_PREFIX = 150
"""The longest prefix (see `streaming.topics`)."""
HASH_DIGITS = 16
"""Hex digits of SHA-256 that end a cut part or a cut name."""
PART_CUT_MARK = "-h"
"""What separates a cut part's head from its hash."""
TOPIC_CUT_MARK = "-t"
"""What separates a cut topic name's head from its hash."""
