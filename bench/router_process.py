"""`router run` as a user runs it, in a child process: started, known to route, stopped.

`RouterProcess(bootstrap, prefix, folder)` writes a settings file into `folder` (instance, bootstrap,
topic_prefix, checkpoint_dir, and any `settings` given; every other setting, the trigger included, is
the default) and runs `router run --config FILE` from the same environment as this Python, in a
process group of its own, its stdout and stderr appended to `folder/router.log`.

Readiness is seen, not guessed: `wait_until_routing` sends one probe message to a local service of
the instance and waits until the router has delivered it to that service's queue topic, so the
query has started, read the routes and the catalog, and written a record.

`stop` sends SIGINT to the process group, as Ctrl-C in a terminal does, and waits until every process
of the group has ended, the JVM too; past the grace period it kills the group (SIGKILL) and says so in
the returned `RouterStop`.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from confluent_kafka import Producer

from bench.common import (
    I1,
    existing,
    lone_message,
    message_id,
    new_prefix,
    prepare,
    progress,
    read_topics,
)
from streaming import topics
from streaming.devtools.processes import end_group
from streaming.rules.model import Instance

READY_TIMEOUT_S = 300.0
STOP_GRACE_S = 60.0


class RouterExited(RuntimeError):
    """The router process ended while it was expected to run."""


@dataclass(frozen=True)
class RouterStop:
    """How the router ended: its exit code (negative: the signal that ended it), after how long."""

    exit_code: int | None
    seconds: float
    """From SIGINT until the process and the rest of its group (its JVM) ended, or were killed."""
    killed: bool
    """They had not all exited `STOP_GRACE_S` after SIGINT and were killed with SIGKILL."""

    def describe(self) -> str:
        """One line on how the router stopped."""
        if self.killed:
            return f"router run: no exit within {self.seconds:.0f} s of SIGINT; killed (SIGKILL)"
        return f"router run: exited {self.exit_code} {self.seconds:.1f} s after SIGINT"


def stop_group(process: subprocess.Popen[bytes], grace: float = STOP_GRACE_S) -> RouterStop:
    """SIGINT to the process group `process` leads, and a wait for the whole group (`end_group`): a
    benchmark that went on while the JVM still shut down would time its next step beside it.
    SIGKILL to the group once `grace` has passed."""
    started = time.monotonic()
    killed = end_group(process.pid, signal.SIGINT, grace)
    process.wait(30)  # ended with its group: this takes its exit code
    return RouterStop(process.returncode, time.monotonic() - started, killed)


class RouterProcess:
    """One `router run` for `instance` on the `prefix` namespace; a context manager that stops it."""

    def __init__(
        self,
        bootstrap: str,
        prefix: str,
        folder: Path,
        instance: Instance = I1,
        environment: Mapping[str, str] | None = None,
        settings: Mapping[str, object] | None = None,
    ) -> None:
        """`environment`: variables set for the router process on top of this process's own;
        `settings`: more lines of its settings file (`metrics_port`, ...), beside the four it always has."""
        self.bootstrap = bootstrap
        self.environment = dict(environment or {})
        self.more_settings = dict(settings or {})
        self.prefix = prefix
        self.instance = instance
        self.folder = folder
        self.log = folder / "router.log"
        self.settings = folder / f"{instance.name}.yaml"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Write the settings file and start `router run`."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self.settings.write_text(
            f"instance: {self.instance.name}\n"
            f"bootstrap: {self.bootstrap}\n"
            f"topic_prefix: {self.prefix}\n"
            f"checkpoint_dir: {self.folder / 'checkpoint'}\n"
            + "".join(f"{k}: {v}\n" for k, v in self.more_settings.items()),
            encoding="utf-8",
        )
        router = Path(sys.executable).with_name("router")
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [str(router), "run", "--config", str(self.settings)],
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.environment},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a group of its own: SIGINT and SIGKILL reach its JVM too
            )

    def running(self) -> bool:
        """True while the process has not ended."""
        return self.process is not None and self.process.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the router's output."""
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return "(no output)"

    def ensure_running(self, waiting_for: str) -> None:
        """Raise RouterExited (with the end of its output) when the router is not running."""
        if not self.running():
            code = None if self.process is None else self.process.returncode
            raise RouterExited(f"router run ended ({code}) before {waiting_for}:\n{self.log_tail()}")

    def send_probe(self, kind: str = "probe") -> tuple[str, str]:
        """Send one message to the first service of the instance's first database that has services.

        Returns its id (`kind` and a random part) and the queue topic the router delivers it to; the
        service's table needs a route that delivers it (the benchmark's tables have a LOCAL route).
        """
        database = next(d for d in self.instance.databases if d.services)
        service = database.services[0]
        probe = f"{kind}-{uuid.uuid4().hex[:12]}"
        key, value = lone_message(probe, service, database.name)
        producer = Producer({"bootstrap.servers": self.bootstrap})
        producer.produce(topics.outbound_topic(self.instance.name, self.prefix), value, key)
        producer.flush(30)
        return probe, topics.queue_topic(self.instance.name, database.name, service, self.prefix)

    def wait_until_routing(self, timeout: float = READY_TIMEOUT_S) -> float:
        """Send a probe message (`send_probe`) and wait until it is routed; return the seconds that took."""
        probe, queue = self.send_probe()
        started = time.monotonic()
        while True:
            self.ensure_running("it routed the probe message")
            if existing(self.bootstrap, [queue]) and any(
                message_id(r.value()) == probe for r in read_topics(self.bootstrap, [queue])
            ):
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"router run routed no probe within {timeout:g} s:\n{self.log_tail()}")
            time.sleep(0.5)

    def stop(self, grace: float = STOP_GRACE_S) -> RouterStop:
        """SIGINT to the router's process group; SIGKILL when the group has not exited within `grace`."""
        if self.process is None:
            return RouterStop(None, 0.0, killed=False)
        return stop_group(self.process, grace)

    def __enter__(self) -> RouterProcess:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self.running():
            self.stop()


@contextmanager
def fresh_router(
    bootstrap: str,
    instance: Instance = I1,
    routes: int = 10,
    settings: Mapping[str, object] | None = None,
) -> Iterator[RouterProcess]:
    """`router run` for `instance` on a fresh namespace with `routes` routes, once it routes.

    The namespace gets the instance's catalog and `bench.common.routes_for(routes)`; the router's
    settings, checkpoint and output live in a temporary folder, deleted at the end, when the
    router is stopped too unless the caller stopped it (`RouterProcess.stop`, to see how it ended).
    `settings`: more lines of the router's settings file (`RouterProcess`), as `shuffle_partitions`.
    """
    prefix = new_prefix()
    prepare(bootstrap, prefix, routes, messages=0, instance=instance)
    folder = Path(tempfile.mkdtemp(prefix="router-bench-run-"))
    try:
        with RouterProcess(bootstrap, prefix, folder, instance, settings=settings) as router:
            progress(f"bench: started router run on {prefix}; waiting until it routes")
            progress(f"bench: router run routes, {router.wait_until_routing():.0f} s after it started")
            yield router
    finally:
        shutil.rmtree(folder, ignore_errors=True)
