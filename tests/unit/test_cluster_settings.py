"""What the router says and refuses for a Spark cluster, without one: the `router spark cluster`
command's arguments, and how a worker's executors are found."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from streaming.cli import build_parser
from streaming.spark.standalone import children


def test_router_spark_cluster_takes_its_workers_port_and_folder() -> None:
    args = build_parser().parse_args(
        ["spark", "cluster", "--workers", "3", "--port", "0", "--state-dir", "x", "--memory", "2g"]
    )
    assert (args.workers, args.port, args.state_dir, args.memory, args.cores) == (3, 0, Path("x"), "2g", 1)


def test_children_are_the_processes_a_process_started() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert child.pid in children(os.getpid())
        assert children(child.pid) == []
    finally:
        child.kill()
        child.wait()
