"""The suite's time bounds: a test that hangs fails at its tier's bound, and the session goes on.

pyproject's `timeout` (pytest-timeout) bounds every test; `tests/conftest.py` gives the unit tier
and the fault tier bounds of their own. These run pytest as `make test` does, in a child process.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

REPORT_BOUNDS = '''
def pytest_collection_finish(session):
    for item in session.items:
        marker = item.get_closest_marker("timeout")
        print("BOUND", item.nodeid, marker.args[0] if marker else "ini", flush=True)
'''
"""A plugin that prints each collected test's bound as the session ends its collection: the
`timeout` marker's seconds, or `ini` where pyproject's `timeout` applies."""


def pytest_run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m pytest ARGS` with the project's pyproject as its settings, in `cwd`."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "-p", "no:cacheprovider", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_test_that_hangs_fails_at_its_bound_with_its_stack_and_the_next_test_still_runs(
    tmp_path: Path,
) -> None:
    (tmp_path / "test_hang.py").write_text(
        "import threading, time\n\n"
        "def test_hangs():\n"
        "    threading.Thread(target=time.sleep, args=(60,), name='beside', daemon=True).start()\n"
        "    time.sleep(60)\n\n"
        "def test_after():\n    assert 1 + 1 == 2\n"
    )
    started = time.monotonic()
    done = pytest_run("-q", "-o", "timeout=2", "--rootdir", str(tmp_path), "test_hang.py", cwd=tmp_path)
    took = time.monotonic() - started
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "Timeout (>2.0s) from pytest-timeout" in out, out
    assert "test_hang.py:5: Failed" in out, out  # where the test hung
    assert "Stack of beside" in out, out  # and what the test's other threads were doing
    assert re.search(r"\b1 failed, 1 passed\b", out), out
    assert took < 30, f"the session took {took:.1f} s: the 60 s sleep was not cut at its 2 s bound"


def test_pyproject_bounds_every_test_by_the_signal_method(tmp_path: Path) -> None:
    (tmp_path / "test_one.py").write_text("def test_one():\n    pass\n")
    done = pytest_run("--collect-only", "--rootdir", str(tmp_path), "test_one.py", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "timeout: 300.0s" in done.stdout, done.stdout
    assert "timeout method: signal" in done.stdout, done.stdout


def test_the_unit_and_fault_tiers_have_their_own_bounds_and_the_rest_pyproject_s(tmp_path: Path) -> None:
    (tmp_path / "report_bounds.py").write_text(REPORT_BOUNDS)
    paths = [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    files = [
        "tests/unit/test_suite_bounds.py",
        "tests/e2e/test_faults.py",
        "tests/integration/test_streaming_job.py",
    ]
    done = pytest_run("--collect-only", "-q", "-p", "report_bounds", *files, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    bounds: dict[str, dict[str, str]] = {}
    for line in done.stdout.splitlines():
        if line.startswith("BOUND "):
            nodeid, bound = line.removeprefix("BOUND ").rsplit(" ", 1)
            path, name = nodeid.split("::", 1)
            bounds.setdefault(path, {})[name] = bound
    assert set(bounds) == set(files), done.stdout
    assert set(bounds["tests/unit/test_suite_bounds.py"].values()) == {"60"}
    assert set(bounds["tests/integration/test_streaming_job.py"].values()) == {"ini"}
    faults = bounds["tests/e2e/test_faults.py"]
    assert faults["test_five_kills_at_random_moments_lose_nothing"] == "900"
    assert set(faults.values()) == {"900"}, faults
