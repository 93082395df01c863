"""What the router says and refuses for a Spark cluster, without one: the executor lines, the
checkpoint path, the `router spark cluster` command's arguments, and how a worker's executors are
found."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from streaming.cli import build_parser
from streaming.config import load_settings
from streaming.devtools.embedded_kafka import free_port
from streaming.devtools.processes import children
from streaming.errors import ConfigError, SparkMasterUnavailable
from streaming.spark.executors import change_line
from streaming.spark.session import master_addresses, wait_for_master


def test_a_lost_executor_is_one_line_with_spark_s_reason() -> None:
    line = change_line("removed\t3\tworker lost: 127.0.0.1:40123 got disassociated")
    assert line == (
        "Spark executor 3 lost (worker lost: 127.0.0.1:40123 got disassociated); its tasks run again "
        "on the executors left, and the micro-batch goes on"
    )
    assert "(no reason given)" in str(change_line("removed\t4\t"))


def test_a_joined_executor_names_its_host_and_cores_and_the_driver_s_own_is_not_said() -> None:
    assert change_line("added\t5\t127.0.0.1\t1") == "Spark executor 5 joined on 127.0.0.1 (1 core(s))"
    assert change_line("added\tdriver\tlocalhost\t2") is None
    assert change_line("removed\tdriver\tstopped") is None


@pytest.mark.parametrize("url", ["hdfs://namenode:8020/router/i1", "s3a://bucket/router/i1"])
def test_a_checkpoint_given_as_a_hadoop_url_is_kept_as_the_url(url: str, tmp_path: Path) -> None:
    settings = tmp_path / "router.yaml"
    settings.write_text(f"instance: i1\ncheckpoint_dir: {url}\n", encoding="utf-8")
    loaded = load_settings(settings, start_after=f"{url}-old")
    assert (loaded.checkpoint_dir, loaded.start_after) == (url, f"{url}-old")


@pytest.mark.parametrize(
    ("given", "reason"),
    [
        ("file:/data/i1", "a URL with `//`"),
        ("hdfs:/router/i1", "a URL with `//`"),
        ("hdfs://namenode:8020", "expected a folder in the URL"),
        ("https://example.com/router/i1", "a web address"),
    ],
)
def test_a_checkpoint_location_that_cannot_work_is_refused_with_the_reason(
    given: str, reason: str, tmp_path: Path
) -> None:
    settings = tmp_path / "router.yaml"
    settings.write_text(f"instance: i1\ncheckpoint_dir: {given}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=reason) as refused:
        load_settings(settings)
    assert given in str(refused.value) and "checkpoint_dir" in str(refused.value)


def test_a_checkpoint_given_as_a_path_is_taken() -> None:
    settings = load_settings(None, instance="i1", checkpoint_dir="/mnt/shared/router/i1")
    assert settings.checkpoint_dir == Path("/mnt/shared/router/i1")


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


def test_a_master_url_names_each_master_with_spark_s_default_port() -> None:
    assert master_addresses("spark://127.0.0.1:7078") == [("127.0.0.1", 7078)]
    assert master_addresses("spark://a:7077,b") == [("a", 7077), ("b", 7077)]
    with pytest.raises(SparkMasterUnavailable, match="spark://host:port"):
        master_addresses("yarn")
    with pytest.raises(SparkMasterUnavailable, match="host:port"):
        master_addresses("spark://a:port")


def test_the_router_waits_for_a_master_that_starts_after_it_and_says_so_once() -> None:
    port = free_port()
    said: list[str] = []
    listening = threading.Event()

    def start_master_late() -> None:
        time.sleep(1.5)
        with socket.create_server(("127.0.0.1", port)) as server:
            listening.set()
            server.accept()[0].close()

    late = threading.Thread(target=start_master_late, daemon=True)
    late.start()
    wait_for_master(f"spark://127.0.0.1:{port}", timeout_s=30, say=said.append)
    late.join(10)
    assert listening.is_set()
    assert said == [f"waiting for the Spark master at spark://127.0.0.1:{port} (up to 30 s)"]


def test_a_master_that_never_answers_is_a_clear_error_after_the_wait() -> None:
    port = free_port()
    started = time.monotonic()
    with pytest.raises(
        SparkMasterUnavailable, match=f"spark://127.0.0.1:{port} to take connections, none did within 1 s"
    ):
        wait_for_master(f"spark://127.0.0.1:{port}", timeout_s=1)
    assert 1 <= time.monotonic() - started < 10


def test_a_stop_ends_the_wait_for_a_master_without_an_error() -> None:
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    started = time.monotonic()
    wait_for_master(f"spark://127.0.0.1:{free_port()}", timeout_s=60, stop=stop)
    assert stop.is_set() and time.monotonic() - started < 10
