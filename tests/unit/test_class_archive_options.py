"""When the driver starts from its class archive, and when it records one (`archive_options`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from streaming.jars import CACHE_ENV, driver_class_archive
from streaming.spark.session import CLASS_ARCHIVE_ENV, archive_options


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    monkeypatch.delenv(CLASS_ARCHIVE_ENV, raising=False)
    return tmp_path


def test_no_archive_recorded_means_no_flag(cache: Path) -> None:
    assert archive_options() == []


def test_a_recorded_archive_is_mapped_quietly(cache: Path) -> None:
    archive = driver_class_archive()
    assert archive.is_relative_to(cache)
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"archive")
    options = archive_options()
    assert options[0] == f"-XX:SharedArchiveFile={archive}"
    assert "-Xshare:auto" in options  # an archive that does not fit is ignored, not an error
    assert "-Xlog:cds=off" in options  # and ignored silently: the JVM would say so on stdout


def test_off_starts_without_the_archive(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = driver_class_archive()
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"archive")
    monkeypatch.setenv(CLASS_ARCHIVE_ENV, "off")
    assert archive_options() == []


def test_recording_writes_where_it_is_told(cache: Path) -> None:
    out = cache / "new.jsa"
    assert archive_options(out)[0] == f"-XX:ArchiveClassesAtExit={out}"
