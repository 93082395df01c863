"""More JVM flags for the driver and the executors, from `ROUTER_JVM_OPTIONS` (`env_jvm_options`)."""

from __future__ import annotations

import pytest

from streaming.errors import RouterError
from streaming.spark.session import JVM_OPTIONS_ENV, env_jvm_options


def test_unset_or_blank_gives_no_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(JVM_OPTIONS_ENV, raising=False)
    assert env_jvm_options() == []
    monkeypatch.setenv(JVM_OPTIONS_ENV, "   ")
    assert env_jvm_options() == []


def test_flags_are_split_on_spaces_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(JVM_OPTIONS_ENV, " -XX:TieredStopAtLevel=1\t-Xss2m  -Dkey=value ")
    assert env_jvm_options() == ["-XX:TieredStopAtLevel=1", "-Xss2m", "-Dkey=value"]


def test_a_word_that_is_not_a_flag_is_refused_with_a_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(JVM_OPTIONS_ENV, "-Xss2m gc.log")
    with pytest.raises(RouterError) as refused:
        env_jvm_options()
    text = str(refused.value)
    assert JVM_OPTIONS_ENV in text and "'gc.log'" in text and "hint:" in text
