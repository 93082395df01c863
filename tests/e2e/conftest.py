"""Fixtures of the end-to-end tests: the router processes a test starts are killed at its end."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from processes import kill

from streaming.devtools.spark_cluster import StandaloneCluster


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    """The router processes a test starts; any still running at the end are killed."""
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            kill(process)


@pytest.fixture
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A Spark standalone master and two workers (1 core, 1 GiB each) on 127.0.0.1, stopped at the end."""
    with StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2) as cluster:
        yield cluster
