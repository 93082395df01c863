"""What /proc says of this machine's processes: for the tools and tests that start and stop them.

A command started in a process group of its own (`start_new_session`) takes its JVM into the group;
`group` lists what is left of it, and `end_group` stops it: the JVM as well as its parent.
`holding_environment` finds processes by a variable set for them, which their children inherit.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

PROC = Path("/proc")


def _stat(pid_folder: Path) -> list[str]:
    """The fields of a process's stat after its name: state, parent, group, ... (OSError once ended)."""
    fields = (pid_folder / "stat").read_text().rsplit(")", 1)[1].split()
    if len(fields) < 3:
        raise OSError(f"{pid_folder}/stat is cut short")
    return fields


def children(pid: int) -> list[int]:
    """The process ids whose parent is `pid` (empty where there is none)."""
    found = []
    for folder in PROC.glob("[0-9]*"):
        try:
            if int(_stat(folder)[1]) == pid:
                found.append(int(folder.name))
        except OSError:
            continue  # ended meanwhile
    return found


def group(pgid: int) -> list[int]:
    """The live processes of process group `pgid` (zombies, which have ended, not counted)."""
    members = []
    for folder in PROC.glob("[0-9]*"):
        try:
            fields = _stat(folder)
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(folder.name))
    return members


def command_line(pid: int) -> bytes:
    """The arguments `pid` runs with, NUL-separated (empty once it has ended)."""
    try:
        return (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return b""


def command_text(pid: int) -> str:
    """`command_line` as one line of text, its arguments separated by spaces."""
    return command_line(pid).replace(b"\0", b" ").decode(errors="replace")


def holding_environment(entry: str) -> list[int]:
    """The live processes whose environment holds `entry` ("NAME=value"), their children included."""
    wanted = entry.encode()
    found = []
    for folder in PROC.glob("[0-9]*"):
        try:
            held = wanted in (folder / "environ").read_bytes().split(b"\0") and _stat(folder)[0] != "Z"
        except OSError:
            continue
        if held:
            found.append(int(folder.name))
    return found


def end_group(pgid: int, sig: int, grace: float, killed_within: float = 30.0) -> bool:
    """`sig` to every process of group `pgid`, then SIGKILL to those left after `grace`.

    Returns once none is left (True: they were killed). A JVM goes on shutting down for a while
    after its parent has exited, so the parent's exit alone does not end the group. SIGKILL is
    delivered, not waited for, so the wait goes on after it too: a group still alive
    `killed_within` seconds later is an error.
    """
    with contextlib.suppress(ProcessLookupError):  # every member ended already
        os.killpg(pgid, sig)
    if _group_ended(pgid, grace):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    if _group_ended(pgid, killed_within):
        return True
    raise RuntimeError(f"process group {pgid} still runs {killed_within:g} s after SIGKILL: {group(pgid)}")


def _group_ended(pgid: int, within: float) -> bool:
    """Whether no process of group `pgid` is left within `within` seconds."""
    deadline = time.monotonic() + within
    while group(pgid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
