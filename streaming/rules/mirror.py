"""Database-mirroring routes: which partner receives the traffic (docs/rules.md §1.13, MI1-MI4).

MI1 (mirror routes come first in the choice step but play no part in matching) lives in
`choice.mirror_tier`; MI4 (a route without MIRROR_ADDRESS never fails over) follows from calling
`principal_address` only for routes of the mirror tier: an ordinary network route is used as it
is, whatever the mirrors status says about its address. MI5 (availability groups) needs nothing
here: an AG listener is an ordinary TCP route.
"""

from __future__ import annotations

from collections.abc import Mapping

from streaming.rules.model import MirrorRole, Route, normalize_address


def principal_address(route: Route, mirrors: Mapping[str, MirrorRole]) -> str | None:
    """Return the partner of a mirror route that is principal now, or None (MI2, MI3).

    `mirrors` maps `normalize_address(partner)` to the role that partner claims when probed.
    MI2: both partners are probed and everything goes to the principal.
    MI3: when neither partner claims to be principal (mirror, unreachable, or not known at all),
    SSB sends to neither and keeps retrying both: None. Should both claim the role, `address`
    (the route's primary partner) is taken.
    """
    for partner in (route.address, route.mirror_address):
        if partner is not None and mirrors.get(normalize_address(partner)) == MirrorRole.PRINCIPAL:
            return partner
    return None
