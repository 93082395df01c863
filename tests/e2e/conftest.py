"""Fixtures of the end-to-end tests: the router processes a test starts are killed at its end."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from processes import kill


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    """The router processes a test starts; any still running at the end are killed."""
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            kill(process)
