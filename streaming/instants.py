"""Instants and spans as the commands read and write them: ISO-8601 UTC, and `90s`, `30m`, `2h`, `1d`.

The router's headers carry instants as ISO-8601 UTC text (`decided_at`, `due_at`); the commands take
windows as a span back from now or an instant (`--since`). Pure: the caller gives `now`.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone

from streaming.errors import ConfigError

_SPAN = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_instant(text: str | None) -> datetime | None:
    """The UTC instant of ISO-8601 text (`2026-11-28T10:01:05Z`, an offset, naive = UTC), or None."""
    if not text:
        return None
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        instant = datetime.fromisoformat(value)
    except ValueError:
        return None
    if instant.tzinfo is None:
        return instant.replace(tzinfo=timezone.utc)
    return instant.astimezone(timezone.utc)


def format_instant(value: datetime | None) -> str | None:
    """`value` as `2026-01-01T00:00:00Z` (milliseconds when it has them), or None."""
    if value is None:
        return None
    utc = value.astimezone(timezone.utc) if value.tzinfo else value
    text = utc.strftime("%Y-%m-%dT%H:%M:%S")
    if utc.microsecond:
        text += f".{utc.microsecond // 1000:03d}"
    return text + "Z"


def parse_span(text: str) -> float:
    """Seconds of a span like `90s`, `30m`, `2h`, `1d` (a bare number is seconds); ConfigError otherwise."""
    found = _SPAN.fullmatch(text)
    if found is None or float(found.group(1)) <= 0:
        raise ConfigError(f"expected a span like 90s, 30m, 2h or 1d (more than 0), got {text!r}")
    return float(found.group(1)) * _UNITS[found.group(2) or "s"]


def format_span(seconds: float) -> str:
    """A span as its largest whole unit: 3600 -> `1h`, 1800 -> `30m`, 90 -> `90s`."""
    for unit in ("d", "h", "m"):
        size = _UNITS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def format_age(seconds: float) -> str:
    """How long ago, for people: `3 s`, `4 min`, `2 h 5 min`, `3 d 4 h`."""
    s = max(int(seconds), 0)
    if s < 120:
        return f"{s} s"
    if s < 7200:
        return f"{s // 60} min"
    if s < 172800:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def window_start(since: str, now: datetime, flag: str = "--since") -> datetime:
    """The first instant of a window: `now` less a span (`parse_span`), or an ISO-8601 instant before now.

    Raises ConfigError naming the flag and the forms accepted.
    """
    if _SPAN.fullmatch(since):
        try:
            return now - timedelta(seconds=parse_span(since))
        except ConfigError as exc:
            raise ConfigError(f"{flag}: {exc}") from None
    instant = parse_instant(since)
    if instant is None:
        raise ConfigError(
            f"{flag}: expected a span like 90s, 30m, 2h or 1d, or an instant like 2026-01-01T00:00:00Z, "
            f"got {since!r}"
        )
    if instant > now:
        raise ConfigError(f"{flag}: expected an instant before now ({format_instant(now)}), got {since!r}")
    return instant
