"""The mappings of a routing service (`resolved_conversations`), in its endpoint's store file.

They are read and written inside the endpoint's transactions, so they commit with the dialogs.
"""

from __future__ import annotations

import sqlite3

from streaming.ddr.answers import Mapping
from streaming.endpoint.endpoint import Dialog

_MAPPINGS = (
    "CREATE TABLE IF NOT EXISTS resolved_conversations (inbound TEXT PRIMARY KEY, "
    "outbound TEXT NOT NULL UNIQUE, service TEXT NOT NULL, broker_instance TEXT)"
)
"""The mappings, in the endpoint's store file: they commit with the dialogs."""


def create_mappings(db: sqlite3.Connection) -> None:
    """Make the mappings' table, when the store file has none yet."""
    db.execute(_MAPPINGS)


def mapping_of(db: sqlite3.Connection, dialog: Dialog) -> Mapping | None:
    """The mapping a dialog belongs to, as its inbound or its outbound side."""
    column = "outbound" if dialog.is_initiator else "inbound"
    row = db.execute(
        "SELECT inbound, outbound, service, broker_instance FROM resolved_conversations "
        f"WHERE {column} = ?",  # one of two column names, not input
        (dialog.conversation_id,),
    ).fetchone()
    return None if row is None else Mapping(*row)


def keep_mapping(db: sqlite3.Connection, mapping: Mapping) -> None:
    """Keep a new mapping: an inbound dialog and the outbound dialog begun for it."""
    db.execute(
        "INSERT INTO resolved_conversations (inbound, outbound, service, broker_instance) "
        "VALUES (?, ?, ?, ?)",
        (mapping.inbound, mapping.outbound, mapping.service, mapping.broker_instance),
    )


def forget(db: sqlite3.Connection, mapping: Mapping) -> None:
    """Remove a mapping: its dialogs ended, or are ending in this transaction."""
    db.execute("DELETE FROM resolved_conversations WHERE inbound = ?", (mapping.inbound,))
