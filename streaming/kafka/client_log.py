"""The Kafka clients' own log lines, and how a broker outage shows in them: once, not per retry.

librdkafka (the confluent-kafka clients: the admin client, the table readers, producers) logs through
the `streaming.kafka.librdkafka` logger. While a broker is away, every client repeats that it
cannot connect, several times a second. `OutageLog`, once installed (`collapse_outages`), lets the
first of those lines through as "Kafka unreachable: ..." and holds the repeats back; when Kafka
answers a request made after the outage began (`answered`, called for each micro-batch the router
wrote), one line says so, with how long it lasted and how many lines were held back.
"""

from __future__ import annotations

import logging
import threading
import time

LIBRDKAFKA_LOGGER = "streaming.kafka.librdkafka"

_UNREACHABLE = (
    "Connection refused",
    "brokers are down",
    "Connect to",
    "Connection reset",
    "timed out",
    "Name or service not known",
    "Failed to resolve",
)
"""Words of librdkafka's lines that say a broker cannot be reached."""


class OutageLog(logging.Filter):
    """Collapses a broker outage's repeated client lines into one line when it starts and one when it ends."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._since: float | None = None
        self._held = 0

    def filter(self, record: logging.LogRecord) -> bool:
        """Let the first line of an outage through (reworded); hold back its repeats."""
        text = record.getMessage()
        if not any(word in text for word in _UNREACHABLE):
            return True
        with self._lock:
            if self._since is not None:
                self._held += 1
                return False
            self._since = time.monotonic()
        record.msg = "Kafka unreachable: %s (its clients' repeats are held back until it answers)"
        record.args = (text,)
        return True

    def answered(self, log: logging.Logger, asked_at: float) -> None:
        """Kafka answered a request made at `asked_at` (time.monotonic): end an outage begun before it.

        One line says that it ended, how long it lasted, and how many lines were held back.
        """
        with self._lock:
            if self._since is None or asked_at < self._since:
                return
            lasted, held = time.monotonic() - self._since, self._held
            self._since, self._held = None, 0
        log.warning("Kafka reachable again after %.0f s (%d repeated client line(s) held back)", lasted, held)


_installed: OutageLog | None = None


def collapse_outages() -> OutageLog:
    """Install the one `OutageLog` on the librdkafka logger (again: the same one) and return it."""
    global _installed
    if _installed is None:
        _installed = OutageLog()
        logging.getLogger(LIBRDKAFKA_LOGGER).addFilter(_installed)
    return _installed
