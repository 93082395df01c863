"""What the end-to-end and fault tests share: `router run` as a child process, and reading back.

A router is started as `python -m streaming.cli run --config FILE` in a process group of its own (so
that SIGKILL and SIGINT reach its JVM too), its output appended to a log file. `Outcome` reads every
record of a set of topics back and says, per message id, where it went and how many times.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Message

from streaming import topics
from streaming.kafka.admin import ensure_topics
from streaming.kafka.avro import MalformedRecord, decode_message
from streaming.kafka.consuming import header_pairs
from streaming.rules.model import Instance, Route
from streaming.tables.topic_io import publish_catalogs, put_route
from tests.topic_records import Partition, partition_ends, read_between, records_now

ROOT = Path(__file__).resolve().parents[2]


def new_namespace(
    bootstrap: str,
    label: str,
    instance: Instance,
    routes: Iterable[Route],
    created: Callable[[str], list[str]],
) -> str:
    """A fresh topic prefix `label` + 8 hex digits holding `instance`'s catalog and `routes`, with
    the topics `created(prefix)` names made (two partitions each)."""
    prefix = f"{label}{uuid.uuid4().hex[:8]}"
    publish_catalogs(bootstrap, [instance], topics.catalogs_topic(prefix))
    for route in routes:
        put_route(bootstrap, instance.name, route, topics.routes_topic(prefix))
    ensure_topics(bootstrap, created(prefix), partitions=2)
    return prefix


def start_router(
    settings: Path, log: Path, processes: list[subprocess.Popen[bytes]]
) -> subprocess.Popen[bytes]:
    """Start `router run --config settings`; it is appended to `processes` (killed by the fixture)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "streaming.cli", "run", "--config", str(settings)],
        cwd=ROOT,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: SIGKILL reaches the JVM too
    )
    processes.append(process)
    return process


def kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL to the router's whole process group, as a crash or `kill -9` ends it."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait(30)


def stop(process: subprocess.Popen[bytes], log: Path, sig: int = signal.SIGINT) -> str:
    """`sig` to the router's process group, as a terminal's Ctrl-C (or a service manager's SIGTERM)
    sends it; the router must exit 0 within two minutes. Returns its log."""
    os.killpg(process.pid, sig)
    code = process.wait(120)
    output = log.read_text(errors="replace")
    assert code == 0, output[-3000:]
    return output


def wait_for(
    condition: Callable[[], object], timeout_s: float, what: str, process: subprocess.Popen[bytes], log: Path
) -> None:
    """Poll `condition` until it holds; fail with the router's log when it exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if process.poll() is not None:
            raise AssertionError(
                f"the router exited ({process.returncode}) before {what}:\n{log.read_text()[-3000:]}"
            )
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout_s} s:\n{log.read_text()[-3000:]}")
        time.sleep(0.5)


def written(bootstrap: str, names: Iterable[str]) -> int:
    """Records the topics hold (their end offsets); a topic not created yet holds none."""
    return sum(partition_ends(bootstrap, names).values())


@dataclass
class Outcome:
    """Where each message went: per topic, how many times each message id was written there."""

    by_topic: dict[str, Counter[str]] = field(default_factory=dict)
    undecodable: dict[str, list[bytes]] = field(default_factory=lambda: defaultdict(list))
    """Per topic, the values that do not decode as messages (the dead-letter topic's, say)."""

    def ids(self, *names: str) -> Counter[str]:
        """How many times each id was written to any of `names`."""
        total: Counter[str] = Counter()
        for name in names:
            total.update(self.by_topic.get(name, Counter()))
        return total


class TopicsRead:
    """A set of topics read as they grow: each `outcome()` reads only what was written since the one
    before, so a wait that polls the outcome reads each record once. Read in full, the five-kill
    test's 200,000 records cost some 5 s of CPU, on the cores the router under test runs on, at
    every poll once their count was reached. A topic not created yet holds none.
    """

    def __init__(self, bootstrap: str, names: Iterable[str]) -> None:
        self.bootstrap = bootstrap
        self.names = sorted(set(names))
        self.seen = Outcome(by_topic={name: Counter() for name in self.names})
        self.ids: set[str] = set()
        """Every message id read so far, from any of the topics."""
        self._next: dict[Partition, int] = {}
        """Per partition, the offset of the next record to read."""

    def outcome(self) -> Outcome:
        """Every record of the topics up to their end offsets now."""
        for message in read_between(self.bootstrap, self._next, partition_ends(self.bootstrap, self.names)):
            self._take(message)
        return self.seen

    def _take(self, message: Message) -> None:
        name, partition, offset = message.topic(), message.partition(), message.offset()
        assert name is not None and partition is not None and offset is not None  # read_between's
        self._next[(name, partition)] = offset + 1
        try:
            ident = decode_message(message.value())["message_id"]
        except MalformedRecord:  # not a message (a dead letter's original bytes)
            self.seen.undecodable[name].append(message.value() or b"")
            return
        self.seen.by_topic[name][ident] += 1
        self.ids.add(ident)


def read_outcome(bootstrap: str, names: Iterable[str]) -> Outcome:
    """Every record of `names` up to their end offsets now."""
    return TopicsRead(bootstrap, names).outcome()


def records_with_headers(bootstrap: str, topic: str) -> list[tuple[dict[str, str], bytes]]:
    """Every record of `topic` now: its headers as text, and its value."""
    return [
        ({k: (v or b"").decode() for k, v in header_pairs(message)}, message.value() or b"")
        for message in records_now(bootstrap, topic, missing_ok=True)
    ]
