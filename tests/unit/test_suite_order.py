"""The suite's order names tests that exist (tests/conftest.py: LONGEST starts the session)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LONGEST

TESTS = Path(__file__).resolve().parents[1]


def test_each_of_the_longest_tests_is_defined_once_in_the_e2e_tier() -> None:
    sources = "".join(path.read_text() for path in sorted((TESTS / "e2e").glob("test_*.py")))
    for name in LONGEST:
        assert sources.count(f"def {name}(") == 1, f"{name} is not a test of tests/e2e: rename it in LONGEST"
