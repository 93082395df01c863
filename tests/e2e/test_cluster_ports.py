"""The test cluster's workers bind ports picked free seconds before: one taken meanwhile by another
process costs a restart on another port, not the cluster's start (a CI run once lost a test so)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

import streaming.devtools.spark_cluster as spark_cluster
from streaming.devtools.embedded_kafka import HOST, free_port
from streaming.devtools.spark_cluster import StandaloneCluster

pytestmark = [pytest.mark.e2e]


def test_a_worker_whose_port_was_taken_meanwhile_starts_again_on_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    taken = socket.socket()
    taken.bind((HOST, 0))
    taken.listen()
    held = taken.getsockname()[1]
    calls: list[int] = []

    def worker_port_taken(exclude: frozenset[int] = frozenset()) -> int:
        calls.append(1)  # the master's port, its web UI's, then the first worker's
        return held if len(calls) == 3 else free_port(exclude=exclude)

    monkeypatch.setattr(spark_cluster, "free_port", worker_port_taken)
    try:
        with StandaloneCluster(tmp_path / "cluster", workers=1) as cluster:
            (worker,) = cluster.workers
            assert worker.restarts == 1 and worker.port != held
            assert cluster.alive_ports() == {worker.port}
    finally:
        taken.close()
