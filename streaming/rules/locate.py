"""Locating the destination service inside the instance for a LOCAL route (docs/rules.md §1.6, L1-L5).

L1: delivery goes straight into the target service's queue of the located database.
L5 (a located service whose queue is disabled waits in the transmission queue) is a local hold,
not a routing decision: the model carries no queue status, so nothing here depends on it.
"""

from __future__ import annotations

from streaming.rules.model import Database, Instance, canonical_guid


def enabled_databases(instance: Instance) -> tuple[Database, ...]:
    """Return the databases routing may deliver to, in catalog order (L4).

    A database whose message delivery is deactivated (`broker_enabled: false`) is never considered.
    """
    return tuple(db for db in instance.databases if db.broker_enabled)


def hosts_service(instance: Instance, service: str) -> bool:
    """True when a broker-enabled database of the instance hosts `service`, byte-exact (M6, L4, R2)."""
    return any(service in db.services for db in enabled_databases(instance))


def locate_database(
    instance: Instance, service: str, broker_instance: str | None, origin: str | None
) -> Database | None:
    """Return the database that receives a message on a LOCAL route, or None (L2, L3, L4).

    L2: with a broker instance (the conversation's, else the chosen route's) only the database
    whose broker instance equals it qualifies; when that database is absent, has delivery off or
    does not host `service`, the service is not found ([AMB] faithful reading).
    L3: without one, the database that holds the conversation (`origin`) is tried first, then the
    other broker-enabled databases in catalog order; the first that hosts `service` receives it.
    Service Broker leaves the order of "the other databases" open; catalog order is this
    engine's deterministic choice. For a message from outside (`origin` None) there is no own
    database, so the first hosting database in catalog order is taken.
    """
    candidates = enabled_databases(instance)
    if broker_instance is not None:
        wanted = canonical_guid(broker_instance)
        return next(
            (
                db
                for db in candidates
                if canonical_guid(db.broker_instance) == wanted and service in db.services
            ),
            None,
        )
    own_first = sorted(candidates, key=lambda db: db.name != origin)
    return next((db for db in own_first if service in db.services), None)
