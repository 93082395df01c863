"""The one exception root of the router: every error a user can see derives from `RouterError`."""

from __future__ import annotations


class RouterError(Exception):
    """Something the user can fix: the message says what was expected and what arrived."""


class ConfigError(RouterError):
    """A settings, route or catalog file is invalid (names the file, line and field)."""


class MalformedRecord(RouterError):
    """A record's bytes do not decode with its Avro schema."""


class KafkaUnavailable(RouterError):
    """The broker could not be reached, started or stopped."""
