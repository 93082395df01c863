"""`router resolve`: parsing, JSON lines on stdout, errors, and the `python -m` entry point."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from streaming.commands import resolve
from streaming.errors import ConfigError, RouterError
from tests.commands import parse

EXAMPLE = Path(__file__).parents[1] / "scenarios" / "examples" / "ex5b-load-balancing.yaml"
REPO = Path(__file__).resolve().parents[2]


def test_defaults_to_the_reference_engine() -> None:
    args = parse(["resolve", str(EXAMPLE)])
    assert (args.engine, args.scenario, args.func) == ("reference", str(EXAMPLE), resolve.run)


def test_unknown_engine_is_refused() -> None:
    with pytest.raises(SystemExit):
        parse(["resolve", "--engine", "magic", str(EXAMPLE)])


def test_prints_one_json_object_per_decision(capsys: pytest.CaptureFixture[str]) -> None:
    assert resolve.run(parse(["resolve", "--engine", "reference", str(EXAMPLE)])) == 0
    lines = capsys.readouterr().out.splitlines()
    decisions = [json.loads(line) for line in lines]
    assert [d["id"] for d in decisions] == ["c1m1", "c1m2", "c1m3"]
    assert decisions[1] == {
        "id": "c1m2",
        "at": "2026-01-01T00:00:00Z",
        "outcome": "send",
        "address": "tcp://server1.Adventure-Works.com:4022/",
        "route": "BalancedRouteOne",
        "match_step": "M1",
        "choice_step": "C3",
    }


def test_bad_scenario_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("instance: 3\n")
    with pytest.raises(ConfigError, match=re.escape("bad.yaml")):
        resolve.run(parse(["resolve", str(bad)]))


def test_spark_engine_missing_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "streaming.spark.decider", None)
    with pytest.raises(RouterError, match="spark engine is not available"):
        resolve.make_decider("spark")


def test_main_accepts_an_optional_resolve_word(capsys: pytest.CaptureFixture[str]) -> None:
    assert resolve.main(["resolve", "--engine", "reference", str(EXAMPLE)]) == 0
    with_word = capsys.readouterr().out
    assert resolve.main([str(EXAMPLE)]) == 0
    assert capsys.readouterr().out == with_word != ""


def test_main_reports_errors_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert resolve.main([str(tmp_path / "missing.yaml")]) == 2
    assert "router resolve: error:" in capsys.readouterr().err


def test_python_dash_m_entry_point() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "streaming.commands.resolve",
            "resolve",
            "--engine",
            "reference",
            str(EXAMPLE),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 3
