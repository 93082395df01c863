"""Fixtures of the end-to-end tests: the router processes a test starts are killed at its end."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator

import pytest


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    """The router processes a test starts; any still running at the end are killed."""
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
