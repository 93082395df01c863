"""The routing tables as one decision sees them: active routes per scope at one instant (R6)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from streaming.rules.batch import RoutingBatch
from streaming.rules.model import Instance, MirrorRole, Route


def active_routes(routes: tuple[Route, ...], now: datetime) -> tuple[Route, ...]:
    """R6: drop the routes that have expired by `now`; they stay in the table but never match.

    A route is active while its expiry instant is absent or later than `now`.
    """
    return tuple(r for r in routes if r.is_active(now))


@dataclass(frozen=True)
class RouteSnapshot:
    """Active routes grouped by routing table (scope), in table order, with the catalog and mirrors."""

    instance: Instance
    now: datetime
    tables: Mapping[str, tuple[Route, ...]]
    mirrors: Mapping[str, MirrorRole] = field(default_factory=dict)

    @classmethod
    def of(cls, batch: RoutingBatch) -> RouteSnapshot:
        """Build the snapshot a batch is decided against (R6 applied at `batch.now`)."""
        tables: dict[str, list[Route]] = {}
        for route in active_routes(batch.routes, batch.now):
            tables.setdefault(route.scope, []).append(route)
        return cls(
            instance=batch.instance,
            now=batch.now,
            tables={scope: tuple(rows) for scope, rows in tables.items()},
            mirrors=batch.mirrors,
        )

    def table(self, scope: str) -> tuple[Route, ...]:
        """Return the active routes of one database's `sys.routes` (empty if it has none)."""
        return self.tables.get(scope, ())
