"""The `router` command as a user runs it: a subprocess, its output, its exit code."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from streaming.cli import COMMANDS

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
ROUTER = [sys.executable, "-m", "streaming.cli"]
EXAMPLE = ROOT / "tests" / "scenarios" / "examples" / "ex5c-load-balancing.yaml"


def router(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ROUTER, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_help_lists_every_command() -> None:
    result = router("--help")
    assert result.returncode == 0
    assert "directory" in COMMANDS
    for command in COMMANDS:
        assert command in result.stdout


@pytest.mark.parametrize("engine", ["reference", "spark"])
def test_resolve_prints_one_json_decision_per_line(engine: str) -> None:
    result = router("resolve", "--engine", engine, str(EXAMPLE))
    assert result.returncode == 0, result.stderr[-2000:]
    decisions = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert decisions, result.stdout
    assert decisions[0]["outcome"] == "send"
    assert decisions[0]["route"] == "BalancedRouteOne" and decisions[0]["match_step"] == "M1"
    # Spark keeps quiet without --verbose: not even the two lines it prints when it starts as a shell.
    assert "log level" not in result.stderr and " WARN " not in result.stderr, result.stderr
    # Nor the JVM's notice of the incubator module Spark's launcher adds (streaming.spark.session).
    assert "incubator" not in result.stderr, result.stderr


def test_a_jvm_that_does_not_start_is_a_clear_error_with_its_own_reason() -> None:
    # A heap size among the JVM's options: Spark's launcher refuses it and the JVM ends at once.
    env = {**os.environ, "ROUTER_JVM_OPTIONS": f"{os.environ.get('ROUTER_JVM_OPTIONS', '')} -Xmx1k"}
    result = subprocess.run(
        [*ROUTER, "resolve", "--engine", "spark", str(EXAMPLE)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env=env,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Not allowed to specify max heap" in result.stderr  # the JVM's reason, relayed
    last = result.stderr.rstrip().splitlines()[-1]
    assert last.startswith("router resolve: error: Spark's JVM ended as it started: its own lines above")
    assert "ROUTER_JVM_OPTIONS" in last
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_a_bad_scenario_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\ninstance: {name: i1}\nroutes: [{scope: AW, name: R, address: 'ftp://x'}]\n")
    result = router("resolve", str(bad))
    assert result.returncode == 2
    assert "bad.yaml" in result.stderr


def test_ddr_check_compiles_the_sample_classifier_and_refuses_a_bad_one(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "routing_service:\n  service: R\n  database: D\n  mode: forward\n  classifier: upper(to_service)\n"
    )
    # One Spark session checks both files: the bad one is named, the good one still checked.
    result = router("ddr", "check", str(bad), "routes/ddr/sales.yaml")
    assert result.returncode == 2, result.stderr[-2000:]
    assert (
        result.stdout.strip() == "SalesRouter in database Sales: forward; the classifier gives a service name"
    )
    assert (
        "bad.yaml: 'upper(to_service)' is not a Spark SQL expression over the message's columns"
        in result.stderr
    )
    assert "1 of 2 file(s) failed" in result.stderr


def test_routes_load_then_list_reads_back_the_table(kafka_bootstrap: str) -> None:
    prefix = f"e2e{uuid.uuid4().hex[:8]}"
    common = ("--bootstrap", kafka_bootstrap, "--topic-prefix", prefix)
    loaded = router("routes", "load", str(ROOT / "routes" / "demo" / "routes.yaml"), *common)
    assert loaded.returncode == 0, loaded.stderr
    listed = router("routes", "list", *common)
    assert listed.returncode == 0, listed.stderr
    assert "OrderPartsRoute" in listed.stdout and "TCP://i2.example:4022" in listed.stdout
    dropped = tmp_sql = Path(os.environ.get("TMPDIR", "/tmp")) / f"{prefix}.sql"
    tmp_sql.write_text("-- instance: i1\nUSE AW;\nDROP ROUTE OrderPartsRoute;\n")
    try:
        assert router("routes", "load", str(dropped), *common).returncode == 0
    finally:
        tmp_sql.unlink()
    assert "OrderPartsRoute" not in router("routes", "list", *common).stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_demo_routes_every_message_and_prints_the_summary(tmp_path: Path) -> None:
    state = tmp_path / "kafka"
    try:
        result = router(
            "demo",
            "--conversations",
            "20",
            "--port",
            str(free_port()),
            "--state-dir",
            str(state),
            timeout=600,
        )
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
        out = result.stdout
        # i1: 20 conversations x 2 messages, each decided once (and again when released from delay).
        routed = re.search(
            r"router i1: \d+ batch\(es\): (\d+) messages routed .*, (\d+) of them released", out
        )
        assert routed is not None, out
        assert int(routed[1]) - int(routed[2]) == 40
        rows = {
            tuple(line.split()[:2]): int(line.split()[-1]) for line in out.splitlines() if ".queue." in line
        }
        assert rows[("i2.queue.Parts.OrderParts", "deliver")] == 20
        assert rows[("i1.queue.AW.AuditService", "deliver")] == 16
    finally:
        router("kafka", "stop", "--state-dir", str(state))
