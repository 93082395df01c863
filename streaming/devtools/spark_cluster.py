"""A Spark standalone cluster on this machine, for tests and for trying the router on a cluster.

`StandaloneCluster(folder, workers=2)` starts a master and `workers` workers (1 core and 1 GiB each
by default) with pyspark's own `bin/spark-class`, the same classes a real cluster runs
(`org.apache.spark.deploy.master.Master`, `org.apache.spark.deploy.worker.Worker`). No Docker, no
Spark download: the pip package is the whole installation. Everything lives in `folder`:

    master.log             the master's stdout and stderr
    worker-N/worker.log    worker N's stdout and stderr
    worker-N/work/         its work dir: each application's executors, their stdout and stderr
    worker-N/local/        its executors' scratch space (shuffle files, spills)

Every process listens on 127.0.0.1 only: the master, the workers and their web UIs (`--host`, and
SPARK_LOCAL_IP, which the executors the workers start inherit). A driver on this machine connects
with `spark.driver.host` 127.0.0.1 too (SPARK_LOCAL_IP in its environment does it;
`driver_environment`). The master's web UI serves its state as JSON (`/json/`): `start` waits until
every worker is registered there and alive.

`add_worker()` starts one more worker; `kill_worker(worker)` ends one with SIGKILL together with
its executors (its child processes), as a machine that dies takes both. `stop()` stops every
process, and, started from Python, every one gets SIGTERM when the process that started it dies
(even by SIGKILL), so a test run killed outright leaves no cluster behind.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from streaming.devtools.embedded_kafka import HOST, _stop_with_parent, free_port, port_is_free
from streaming.devtools.processes import children
from streaming.errors import RouterError
from streaming.jvm_flags import SPARK_JVM_OPTIONS_ENV, flags_from_env

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
DAEMON_MEMORY = "256m"
"""The heap of the master and worker JVMs themselves (Spark's default: 1g); executors get their own."""


class SparkClusterError(RouterError):
    """The standalone cluster could not be started, or a process of it did not do what was asked."""


def spark_class() -> Path:
    """The `bin/spark-class` of the pyspark package: it runs a Spark class on pyspark's jars."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise SparkClusterError("expected the pyspark package (pip install pyspark), found none")
    script = Path(spec.origin).parent / "bin" / "spark-class"
    if not script.is_file():
        raise SparkClusterError(f"expected pyspark's bin/spark-class at {script}, found none")
    return script


def driver_environment() -> dict[str, str]:
    """What a driver on this machine needs in its environment to listen on 127.0.0.1 only."""
    return {"SPARK_LOCAL_IP": HOST}


PORT_RETRIES = 3
"""How often a worker whose port was taken before it bound it is started again on another."""


@dataclass
class Worker:
    """One worker process: its RPC port (its id on the master's page) and its folder."""

    number: int
    port: int
    folder: Path
    process: subprocess.Popen[bytes]
    restarts: int = 0
    """How often it was started again on another port (`PORT_RETRIES` at most)."""

    @property
    def log_file(self) -> Path:
        """The worker's stdout and stderr."""
        return self.folder / "worker.log"

    def executors(self) -> list[int]:
        """The process ids of the executor JVMs this worker runs now (its child processes)."""
        return children(self.process.pid)


class StandaloneCluster:
    """A master and its workers, run as child processes (see the module docstring).

    `port` is the master's RPC port (None: a free one); `cores` and `memory` are what each worker
    offers its executors. As a context manager it starts on enter and stops on exit.
    """

    def __init__(
        self,
        folder: Path | str,
        workers: int = 2,
        *,
        port: int | None = None,
        cores: int = 1,
        memory: str = "1g",
        start_timeout: float = 90.0,
    ) -> None:
        self.folder = Path(folder).expanduser().resolve()
        self.initial_workers = workers
        self.port = port
        self.cores = cores
        self.memory = memory
        self.start_timeout = start_timeout
        self.ui_port: int | None = None
        self.master: subprocess.Popen[bytes] | None = None
        self.workers: list[Worker] = []
        self._numbered = 0

    @property
    def url(self) -> str:
        """The master's URL, for `spark_master` or ROUTER_SPARK_MASTER: spark://127.0.0.1:PORT."""
        if self.port is None or self.master is None:
            raise SparkClusterError("the standalone cluster is not running: start() it first")
        return f"spark://{HOST}:{self.port}"

    def _environment(self, local_dirs: Path | None = None) -> dict[str, str]:
        given = os.environ.get("SPARK_DAEMON_JAVA_OPTS", "").split()
        daemon_flags = [*given, *flags_from_env(SPARK_JVM_OPTIONS_ENV)]
        env = {
            **os.environ,
            **driver_environment(),
            "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
            # A port taken is an error, not a quiet move to the next one, which the workers (and the
            # driver) would not find.
            # No REST submission server: the router is its own driver, and two masters on one
            # machine would both take its fixed port (6066), the second failing to.
            "SPARK_MASTER_OPTS": "-Dspark.port.maxRetries=0 -Dspark.master.rest.enabled=false",
            "SPARK_WORKER_OPTS": "-Dspark.port.maxRetries=0",
            # Both daemons' JVMs take the flags the router's Spark JVMs do (the tests' C1 compiler).
            "SPARK_DAEMON_JAVA_OPTS": " ".join(daemon_flags),
            # The daemons read no spark-defaults.conf meant for a driver.
            "SPARK_CONF_DIR": str(self.folder / "conf"),
        }
        if local_dirs is not None:
            env["SPARK_LOCAL_DIRS"] = str(local_dirs)
        return env

    def _launch(self, args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            out.write(f"=== router: {' '.join(args[:1])} at {time.ctime()} ===\n".encode())
            out.flush()
            # spark-class ends by exec'ing the JVM: the process started here is the daemon itself.
            return subprocess.Popen(
                [str(spark_class()), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=log.parent,
                env=env,
                preexec_fn=_stop_with_parent,
            )

    def start(self) -> StandaloneCluster:
        """Start the master and the workers; return once every worker is registered and alive."""
        if self.master is not None:
            return self
        (self.folder / "conf").mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        if not port_is_free(self.port):
            raise SparkClusterError(
                f"expected port {self.port} on {HOST} to be free for the Spark master, something listens "
                "there (another cluster? pick another port)"
            )
        self.ui_port = free_port(exclude=frozenset({self.port}))
        self.master = self._launch(
            [MASTER_CLASS, "--host", HOST, "--port", str(self.port), "--webui-port", str(self.ui_port)],
            self.folder / "master.log",
            self._environment(),
        )
        try:
            for _ in range(self.initial_workers):
                self._start_worker()
            self.wait_for_workers()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_worker(self) -> Worker:
        self._numbered += 1
        number = self._numbered
        folder = self.folder / f"worker-{number}"
        (folder / "work").mkdir(parents=True, exist_ok=True)
        (folder / "local").mkdir(parents=True, exist_ok=True)
        port = free_port(exclude=frozenset({self.port or 0, self.ui_port or 0}))
        process = self._launch(
            [
                WORKER_CLASS,
                "--host",
                HOST,
                "--port",
                str(port),
                "--webui-port",
                str(free_port(exclude=frozenset({port}))),
                "--cores",
                str(self.cores),
                "--memory",
                self.memory,
                "--work-dir",
                str(folder / "work"),
                self.url,
            ],
            folder / "worker.log",
            self._environment(local_dirs=folder / "local"),
        )
        worker = Worker(number, port, folder, process)
        self.workers.append(worker)
        return worker

    def add_worker(self) -> Worker:
        """Start one more worker; return it once the master has it alive."""
        worker = self._start_worker()
        self.wait_for_workers()
        return worker

    def state(self) -> dict[str, Any]:
        """The master's state as its web UI gives it (`/json/`): workers, applications, cores."""
        if self.ui_port is None:
            raise SparkClusterError("the standalone cluster is not running: start() it first")
        with urllib.request.urlopen(f"http://{HOST}:{self.ui_port}/json/", timeout=5) as answer:
            return dict(json.load(answer))

    def alive_ports(self) -> set[int]:
        """The RPC ports of the workers the master counts as alive."""
        return {int(w["port"]) for w in self.state().get("workers", []) if w.get("state") == "ALIVE"}

    def wait_for_workers(self) -> None:
        """Wait until every running worker is registered with the master and alive."""
        deadline = time.monotonic() + self.start_timeout
        while True:
            self._restart_workers_whose_port_was_taken()
            for name, process, log in self._processes():
                if process.poll() is not None:
                    raise SparkClusterError(
                        f"the Spark {name} exited ({process.returncode}) while the cluster started; "
                        f"the end of {log}:\n{_tail(log)}"
                    )
            wanted = {w.port for w in self.workers if w.process.poll() is None}
            try:
                if wanted <= self.alive_ports():
                    return
            except (OSError, urllib.error.URLError, ValueError):
                pass  # the master's web UI is not up yet
            if time.monotonic() > deadline:
                raise SparkClusterError(
                    f"expected {len(wanted)} Spark worker(s) registered with the master {self.url} "
                    f"within {self.start_timeout:g} s, they were not; the end of "
                    f"{self.folder / 'master.log'}:\n{_tail(self.folder / 'master.log')}"
                )
            time.sleep(0.2)

    def _restart_workers_whose_port_was_taken(self) -> None:
        """A worker that exited because its port was taken meanwhile is started again on another.

        Its port is picked free, but the worker binds it seconds later, once its JVM is up; on a
        busy machine another process can take it first (the worker then logs a BindException).
        """
        for worker in list(self.workers):
            if worker.process.poll() is None or worker.restarts >= PORT_RETRIES:
                continue
            if "Address already in use" not in _tail(worker.log_file, 400):
                continue
            self.workers.remove(worker)
            again = self._start_worker()
            again.restarts = worker.restarts + 1

    def _processes(self) -> list[tuple[str, subprocess.Popen[bytes], Path]]:
        found = [("master", self.master, self.folder / "master.log")] if self.master is not None else []
        return found + [(f"worker {w.number}", w.process, w.log_file) for w in self.workers if w.process]

    def kill_worker(self, worker: Worker) -> list[int]:
        """SIGKILL `worker` and its executor JVMs at once, as a machine that dies; return the executors' pids.

        The master learns of it when the worker's connection closes, and the driver of its lost
        executors; the worker is removed from `workers`.
        """
        executors = worker.executors()
        worker.process.send_signal(signal.SIGKILL)
        for pid in executors:
            _signal(pid, signal.SIGKILL)
        worker.process.wait(30)
        self.workers.remove(worker)
        return executors

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the workers (they stop their executors), then the master: SIGTERM, SIGKILL past `timeout`."""
        executors = [pid for w in self.workers for pid in w.executors()]
        processes = [w.process for w in self.workers] + ([self.master] if self.master is not None else [])
        for process in processes:
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + timeout
        for process in processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)
        for pid in executors:  # a worker killed past the deadline leaves its executors
            _signal(pid, signal.SIGKILL)
        self.workers = []
        self.master = None

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # ended already
        os.kill(pid, sig)


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"
