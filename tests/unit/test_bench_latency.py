"""bench.latency and bench.router_process: the router a latency run starts gets the settings asked for."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from bench import latency, router_process
from bench.router_process import RouterProcess
from streaming.config import DEFAULT_TRIGGER_SECONDS, load_settings
from streaming.rules.model import Instance


class Started(Exception):
    """Raised where the run would start its router: what it was given is all these tests look at."""


def test_more_settings_are_lines_of_the_routers_settings_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands: list[list[str]] = []

    def popen(command: list[str], **_options: Any) -> subprocess.Popen[bytes]:
        commands.append(command)
        raise Started

    monkeypatch.setattr(router_process.subprocess, "Popen", popen)
    router = RouterProcess("127.0.0.1:9", "benchprefix", tmp_path, settings={"shuffle_partitions": 2})
    with pytest.raises(Started):
        router.start()
    lines = router.settings.read_text(encoding="utf-8").splitlines()
    assert lines[:3] == ["instance: i1", "bootstrap: 127.0.0.1:9", "topic_prefix: benchprefix"]
    assert "shuffle_partitions: 2" in lines
    assert commands[0][-3:] == ["run", "--config", str(router.settings)]


def settings_given(monkeypatch: pytest.MonkeyPatch, **options: Any) -> list[Mapping[str, object] | None]:
    """The settings `measure_latency(**options)` hands the router it would start."""
    given: list[Mapping[str, object] | None] = []

    @contextmanager
    def fresh_router(
        _bootstrap: str, _instance: Instance, _routes: int, more: Mapping[str, object] | None = None
    ) -> Iterator[RouterProcess]:
        given.append(more)
        raise Started
        yield  # a generator, as the real one is

    monkeypatch.setattr(latency, "fresh_router", fresh_router)
    with pytest.raises(Started):
        latency.measure_latency("127.0.0.1:9", [1000.0], 1.0, **options)
    return given


@pytest.mark.parametrize(
    ("partitions", "settings"),
    # 0 reaches the router, whose settings refuse it, rather than falling back to the default.
    [(2, {"shuffle_partitions": 2}), (0, {"shuffle_partitions": 0}), (None, None)],
)
def test_state_partitions_reach_the_routers_settings(
    monkeypatch: pytest.MonkeyPatch, partitions: int | None, settings: dict[str, int] | None
) -> None:
    assert settings_given(monkeypatch, state_partitions=partitions) == [settings]


@pytest.mark.parametrize(
    ("trigger", "partitions", "settings"),
    [
        (0.5, None, {"trigger_seconds": 0.5}),
        (0.25, 2, {"shuffle_partitions": 2, "trigger_seconds": 0.25}),
        # 0 reaches the router, whose settings refuse it, rather than falling back to the default.
        (0.0, None, {"trigger_seconds": 0.0}),
    ],
)
def test_the_trigger_reaches_the_routers_settings(
    monkeypatch: pytest.MonkeyPatch, trigger: float, partitions: int | None, settings: dict[str, float]
) -> None:
    assert settings_given(monkeypatch, state_partitions=partitions, trigger_s=trigger) == [settings]


def test_the_settings_file_a_trigger_writes_is_read_as_that_micro_batch_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def popen(_command: list[str], **_options: Any) -> subprocess.Popen[bytes]:
        raise Started

    monkeypatch.setattr(router_process.subprocess, "Popen", popen)
    given = RouterProcess("127.0.0.1:9", "benchprefix", tmp_path / "given", settings={"trigger_seconds": 0.5})
    default = RouterProcess("127.0.0.1:9", "benchprefix", tmp_path / "default")
    for router in (given, default):
        with pytest.raises(Started):
            router.start()
    assert load_settings(given.settings).trigger_seconds == 0.5
    assert load_settings(default.settings).trigger_seconds == DEFAULT_TRIGGER_SECONDS == 1.0


def test_the_busy_interval_and_its_messages_reach_the_routers_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    given = settings_given(monkeypatch, trigger_s=1.0, busy_trigger_s=1.0, busy_messages=500)
    assert given == [{"trigger_seconds": 1.0, "busy_trigger_seconds": 1.0, "busy_messages": 500}]
    assert settings_given(monkeypatch, busy_trigger_s=0.25) == [{"busy_trigger_seconds": 0.25}]
