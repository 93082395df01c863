"""What /proc says of processes (`streaming.devtools.processes`), and the bench's stop of a process group
(`bench.router_process.stop_group`), which waits for every process of the group, not its leader alone."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

from bench.router_process import stop_group
from streaming.devtools.processes import children, command_text, group, holding_environment

LEADER = """
import signal, subprocess, sys, time
# The child outlives the leader: it ignores SIGINT and ends `sys.argv[1]` seconds later, as a JVM
# goes on shutting down after its Python parent has exited.
child = subprocess.Popen([sys.executable, "-c", "import signal, sys, time; "
    "signal.signal(signal.SIGINT, signal.SIG_IGN); print(flush=True); time.sleep(float(sys.argv[1]))",
    sys.argv[1]], stdout=subprocess.PIPE)
child.stdout.readline()  # its SIGINT is ignored from here on
print("ready", flush=True)
time.sleep(600)
"""


def _group_leader(child_s: float, mark: str) -> subprocess.Popen[bytes]:
    leader = subprocess.Popen(
        [sys.executable, "-c", LEADER, str(child_s)],
        stdout=subprocess.PIPE,
        start_new_session=True,
        env={**os.environ, "ROUTER_TEST_MARK": mark},
    )
    assert leader.stdout is not None and leader.stdout.readline() == b"ready\n"
    return leader


def test_the_group_its_children_and_its_environment_name_the_same_processes() -> None:
    mark = uuid.uuid4().hex
    leader = _group_leader(60.0, mark)
    try:
        members = group(leader.pid)
        (child,) = children(leader.pid)
        assert sorted(members) == sorted([leader.pid, child])
        assert sorted(holding_environment(f"ROUTER_TEST_MARK={mark}")) == sorted(members)
        assert holding_environment(f"ROUTER_TEST_MARK={mark}x") == []
        assert "import signal" in command_text(child) and command_text(child).startswith(sys.executable)
    finally:
        stop_group(leader, grace=0.2)  # the child ignores SIGINT: killed
    assert group(leader.pid) == [] and holding_environment(f"ROUTER_TEST_MARK={mark}") == []
    assert command_text(leader.pid) == ""


def test_a_stop_waits_for_the_process_that_outlives_the_groups_leader() -> None:
    leader = _group_leader(1.0, uuid.uuid4().hex)
    started = time.monotonic()
    stopped = stop_group(leader, grace=30.0)
    assert group(leader.pid) == []
    assert not stopped.killed and stopped.exit_code is not None
    assert stopped.seconds >= 0.9 and time.monotonic() - started >= 0.9


def test_a_stop_kills_the_group_when_a_process_of_it_outlives_the_grace() -> None:
    leader = _group_leader(60.0, uuid.uuid4().hex)
    stopped = stop_group(leader, grace=1.0)
    assert stopped.killed and stopped.seconds < 30
    assert group(leader.pid) == []
