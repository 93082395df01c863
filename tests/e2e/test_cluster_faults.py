"""The fault tier on a Spark standalone cluster: `router run` as a user runs it, a worker killed under it.

The cluster is real (`streaming.devtools.spark_cluster`: a master and two workers from pyspark's own
spark-class, on 127.0.0.1), and so is the broker; the traffic and the accounting of every message
id are the fault tier's own (tests/e2e/test_faults.py).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from processes import start_router, stop, wait_for, written
from test_faults import accounted, assert_every_message_accounted_for, late_routed_stream

from streaming.devtools.processes import children, command_line, command_text
from streaming.devtools.spark_cluster import StandaloneCluster, driver_environment
from streaming.spark.session import CLASS_ARCHIVE_ENV
from tests.class_archive import archive_mappings

pytestmark = [pytest.mark.e2e, pytest.mark.fault]

PER_TRIGGER = 2_500
"""What `late_routed_stream`'s settings read per micro-batch."""


def children_running(pid: int, program: str) -> list[int]:
    """The child processes of `pid` that run `program` ("python", "java"): their executable's name
    begins with it. Only the executable counts, not an argument that names a path with it."""
    found = []
    for child in children(pid):
        executable = command_line(child).split(b"\0", 1)[0]
        if executable and Path(executable.decode(errors="replace")).name.startswith(program):
            found.append(child)
    return found


def command_lines(pids: list[int]) -> dict[int, str]:
    """Each process's command line, as text (for a failure's message; empty once it has ended)."""
    return {pid: command_text(pid) for pid in pids}


def test_a_worker_killed_with_its_executor_mid_stream_loses_nothing(
    spark_cluster: StandaloneCluster,
    started: list[subprocess.Popen[bytes]],
    kafka_bootstrap: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 43: `router run` on a master and two workers routes 20,000 messages; once it writes,
    one worker and its executor JVM are killed with SIGKILL and another worker is started. The
    query goes on, on the executors left and the new one; every message id is accounted for, the
    only copies are of the batch in flight; the router says the loss in one line, with no stack."""
    for name, value in driver_environment().items():
        monkeypatch.setenv(name, value)  # the driver, started by `router run`, listens on 127.0.0.1
    prefix, traffic, settings, log, names = late_routed_stream(kafka_bootstrap, tmp_path)
    with settings.open("a", encoding="utf-8") as extra:
        extra.write(f"spark_master: {spark_cluster.url}\n")
    router = start_router(settings, log, started)

    def both_run_executors() -> bool:
        return all(worker.executors() for worker in spark_cluster.workers)

    wait_for(both_run_executors, 180, "an executor on each worker", router, log)

    # The router's driver JVM is its one java child; waited for, and a failure names what ran
    # instead (once, both workers ran executors while the router's log was still empty and no java
    # child of it was found).
    def one_driver() -> bool:
        return len(children_running(router.pid, "java")) == 1

    try:
        wait_for(one_driver, 60, "driver JVM as the router's one java child", router, log)
    except AssertionError as failure:
        children_now = command_lines(children(router.pid))
        raise AssertionError(f"{failure}\nthe router's (pid {router.pid}) children: {children_now}") from None
    (driver,) = children_running(router.pid, "java")
    if os.environ.get(CLASS_ARCHIVE_ENV) != "off":  # else set-up recorded no archive
        # The driver on a cluster has the classpath the class archive was recorded with, and maps it.
        assert archive_mappings(driver), "the driver on the cluster did not map the class archive"
    wait_for(lambda: written(kafka_bootstrap, names) > 0, 300, "routing", router, log)
    victim = spark_cluster.workers[0]
    killed = spark_cluster.kill_worker(victim)
    assert killed, "the killed worker ran an executor"
    assert written(kafka_bootstrap, names) < len(traffic.ids), "the kill was meant to interrupt the stream"
    newcomer = spark_cluster.add_worker()
    wait_for(lambda: bool(newcomer.executors()), 180, "an executor on the new worker", router, log)
    wait_for(accounted(kafka_bootstrap, prefix, traffic), 300, "every message", router, log)
    # The job has no Python code on the executors (no Python UDFs): they started no Python worker.
    for worker in spark_cluster.workers:
        for executor in worker.executors():
            python = children_running(executor, "python")
            assert not python, f"executor {executor} started a Python worker: {command_lines(python)}"
    output = stop(router, log)

    final = assert_every_message_accounted_for(
        kafka_bootstrap, prefix, traffic, max_copies=2, late_delayed=False
    )
    copies = sum(count - 1 for count in final.values())
    # The kill can repeat the micro-batch in flight: its messages, and the delayed ones it released.
    assert copies <= PER_TRIGGER + len(traffic.late), copies
    lost = re.findall(r"Spark executor \S+ lost \(", output)
    assert len(lost) == 1, output[-3000:]
    assert "Traceback" not in output and "\tat " not in output, output[-3000:]
    assert not re.search(r"^\S+ (ERROR|WARN) ", output, re.MULTILINE), output[-3000:]
