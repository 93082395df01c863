"""Which routing table a message is matched against, and the two scoping shortcuts (docs/rules.md §1.2).

S1-S3 pick the table; S4 lets a reply arriving from outside skip matching; S5 turns a locally
originated message whose next hop is this very instance into an incoming one.
"""

from __future__ import annotations

from dataclasses import replace

from streaming.rules.model import REMOTE, Database, Instance, Message, canonical_guid, normalize_address

MSDB = "msdb"
"""The database whose routes decide traffic that arrives from outside the instance (S3, F7)."""


def routing_scope(message: Message) -> str:
    """Return the database whose `sys.routes` is searched for `message` (S1, S2, S3).

    S1: a conversation begun in this instance uses only the routes of the database that created it.
    S2: a reply sent by a target endpoint of this instance uses the routes of the database hosting
    that endpoint; in a scenario that is the message's `origin` too, so S1 and S2 read the same.
    S3: a message arriving from another instance (origin `remote`) uses msdb's routes.
    """
    return MSDB if message.is_remote else message.origin


def reply_shortcut_database(message: Message, instance: Instance) -> Database | None:
    """Return the database that takes an incoming reply directly, without matching (S4).

    Applies only to a message that arrived from outside (origin `remote`), was sent by the target
    side of its conversation (`from_target`) and is addressed to the broker instance of a database
    of this instance. Faithful reading of S4 [AMB]: a database with message delivery off does not
    count (it is invisible to routing, L4), so such a reply goes through normal msdb matching.
    As in the decision's order (§1.7), the shortcut does not look at the database's services.
    """
    if not (message.is_remote and message.from_target and message.broker_instance):
        return None
    wanted = canonical_guid(message.broker_instance)
    return next(
        (
            db
            for db in instance.databases
            if db.broker_enabled and canonical_guid(db.broker_instance) == wanted
        ),
        None,
    )


def loops_back(address: str, instance: Instance) -> bool:
    """True when a next-hop address is this instance's own endpoint address (S5, LP2).

    Addresses are compared in their normalized form: scheme and host case-insensitive, a trailing
    `/` insignificant (R4).
    """
    return normalize_address(address) == normalize_address(instance.address)


def as_incoming(message: Message) -> Message:
    """Return `message` as if it had arrived from outside, to be re-routed with msdb (S5)."""
    return replace(message, origin=REMOTE)
