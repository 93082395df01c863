"""`router routes diff` and `routes export` as a pipeline runs them: exit codes, stdout and stderr."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def router(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streaming.cli", *args], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


def test_diff_exits_0_for_no_change_1_for_a_change_2_for_a_bad_file(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    common = ("--bootstrap", kafka_bootstrap, "--topic-prefix", f"e2e{uuid.uuid4().hex[:8]}")
    demo = str(ROOT / "routes" / "demo" / "routes.yaml")
    assert router("routes", "load", demo, *common).returncode == 0

    same = router("routes", "diff", demo, *common)
    assert (same.returncode, same.stdout.endswith("no change\n")) == (0, True), same.stderr

    change = tmp_path / "change.yaml"
    change.write_text(
        "- {instance: i1, op: alter, scope: AW, name: OrderPartsRoute, address: 'TCP://f2.example:4022'}\n"
    )
    changed = router("routes", "diff", "--json", str(change), *common)
    assert changed.returncode == 1, changed.stderr
    (line,) = changed.stdout.splitlines()  # JSON alone on stdout; the summary on stderr
    assert json.loads(line)["fields"] == {
        "address": {"old": "TCP://f1.example:4022", "new": "TCP://f2.example:4022"}
    }
    assert "0 create, 1 alter, 0 drop" in changed.stderr

    bad = tmp_path / "bad.yaml"
    bad.write_text("- {instance: i1, scope: AW, name: r, address: 'tcp://nohost'}\n")
    refused = router("routes", "diff", str(bad), *common)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and "bad.yaml:1: route AW/r: field 'address'" in refused.stderr

    exported = router("routes", "export", "--instance", "f1", "--format", "sql", *common)
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.startswith("-- instance: f1\n\nUSE [msdb];\nGO\nCREATE ROUTE [ToInitiator] WITH ")
    assert "exported 2 route(s) of instance f1" in exported.stderr
