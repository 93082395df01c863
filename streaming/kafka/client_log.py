"""The Kafka clients' own log lines, and how a broker outage shows in them: once, not per retry.

librdkafka (the confluent-kafka clients: the admin client, the table readers, producers) logs through
the `streaming.kafka.librdkafka` logger. While a broker is away, every client repeats that it
cannot connect, several times a second. `OutageLog`, once installed (`collapse_outages`), lets the
first of those lines through as "Kafka unreachable: ..." and holds the repeats back; when Kafka
answers a request made after the outage began (`answered`, called for each micro-batch the router
wrote), one line says so, with how long it lasted and how many lines were held back. On a cluster
of several brokers, a line about one of them goes to the job's broker watch instead (`one_broker`):
the cluster still answers, and the watch says that broker is away, once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

LIBRDKAFKA_LOGGER = "streaming.kafka.librdkafka"

_WAITED_OUT = ("Coordinator load in progress", "another concurrent operation on the same transaction")
"""Words of librdkafka's lines about a state the client waits out by itself, retrying: a broker
started a moment ago still loads its coordinators when an idempotent producer asks it for its
producer id; a transactional producer asks for it while the broker still aborts the transaction a
killed predecessor left open (`router redrive` run again). Should the state last, the client's own
request fails, with an error the caller reports."""

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
        self._closing = 0
        self.one_broker: Callable[[str], bool] | None = None
        """Takes a line about one broker when the cluster has others that may answer, and says
        whether it did: `streaming.kafka.broker_watch.BrokerWatch.refused_line`."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Let the first line of an outage through (reworded); hold back its repeats."""
        text = record.getMessage()
        with self._lock:
            if self._closing:
                return False
        if not any(word in text for word in _UNREACHABLE):
            return True
        taken_by = self.one_broker
        if taken_by is not None and taken_by(text):
            return False  # one broker of several: its watch said so, once
        with self._lock:
            if self._since is not None:
                self._held += 1
                return False
            self._since = time.monotonic()
        record.msg = "Kafka unreachable: %s (its clients' repeats are held back until it answers)"
        record.args = (text,)
        return True

    def unreachable(self) -> tuple[float, int] | None:
        """Since when (time.monotonic) Kafka is unreachable, and the lines held back; None when it is not."""
        with self._lock:
            return None if self._since is None else (self._since, self._held)

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

    @contextmanager
    def closing(self) -> Iterator[None]:
        """Hold back the clients' lines while they are closed, once the router has stopped.

        A client hands over its log lines when it is polled or closed: one the router polls rarely
        (a requests reader, while no route names the dynamic routing service) gives them all at its
        close, lines about a broker that was away long before ("Disconnected", "Connection
        refused"), which would end the router's output as if Kafka were unreachable now.
        """
        with self._lock:
            self._closing += 1
        try:
            yield
        finally:
            with self._lock:
                self._closing -= 1


class _WaitedOut(logging.Filter):
    """Holds back librdkafka's lines about a state it waits out by itself (`_WAITED_OUT`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return not any(words in text for words in _WAITED_OUT)


_LOG = logging.getLogger(LIBRDKAFKA_LOGGER)
_LOG.addFilter(_WaitedOut())


def librdkafka_log() -> logging.Logger:
    """The logger every confluent-kafka client of the router logs through (`logger=`)."""
    return _LOG


_installed: OutageLog | None = None


def collapse_outages() -> OutageLog:
    """Install the one `OutageLog` on the librdkafka logger (again: the same one) and return it."""
    global _installed
    if _installed is None:
        _installed = OutageLog()
        _LOG.addFilter(_installed)
    return _installed
