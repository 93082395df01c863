"""Next hops derived from service names for TRANSPORT routes (docs/rules.md §1.14, T1-T4).

T2 (TRANSPORT is the last choice tier) lives in `choice.transport_tier`. T3 [AMB]: route files
refuse a TRANSPORT route that names a service or broker instance (`streaming.tables.validate`); the
rules would match one like any other route.
"""

from __future__ import annotations

import re

_TCP_PREFIX = re.compile(r"(tcp://[^/:\s]+:[0-9]+)(?:/|$)", re.IGNORECASE)


def transport_address(service: str) -> str | None:
    """Return the next hop a TRANSPORT route derives from a service name, or None (T1, T4).

    T1: a service name that begins with `tcp://host:port` routes to that address, e.g.
    `tcp://orders.contoso.com:4022/Orders` gives `tcp://orders.contoso.com:4022`.
    Parse rule (T4 [INF]): case-insensitive `tcp://`, a host, `:`, a decimal port; the address
    ends at the first `/` after the port or at the end of the name. Any other name cannot be
    routed by a TRANSPORT route (T4 faithful reading: the TRANSPORT candidate is unusable).
    """
    found = _TCP_PREFIX.match(service)
    return found.group(1) if found else None
