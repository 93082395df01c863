"""The driver JVM maps the class archive `make setup` recorded (`streaming.spark.session.archive_options`).

The archive only helps if the JVM really maps it: one recorded with another classpath is ignored
silently. `jcmd <pid> VM.info` lists the files the JVM has mapped; the archive must be among them.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from pyspark.sql import SparkSession

from streaming.jars import driver_class_archive
from streaming.spark.session import CLASS_ARCHIVE_ENV

pytestmark = pytest.mark.integration


def test_the_driver_jvm_maps_the_class_archive_make_setup_recorded(spark: SparkSession) -> None:
    if os.environ.get(CLASS_ARCHIVE_ENV) == "off":
        pytest.skip(f"{CLASS_ARCHIVE_ENV}=off: set-up recorded no class archive and the driver uses none")
    archive = driver_class_archive()
    assert archive.is_file(), f"make setup recorded no class archive at {archive}"
    jcmd = shutil.which("jcmd")
    assert jcmd is not None, "the JDK's jcmd is needed to see what the JVM mapped"
    assert spark._jvm is not None
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    info = subprocess.run([jcmd, str(pid), "VM.info"], capture_output=True, text=True, timeout=60).stdout
    mapped = [line for line in info.splitlines() if line.rstrip().endswith(str(archive))]
    assert mapped, f"the driver JVM did not map {archive} (its classpath differs from the recording's?)"
    assert "CDS: on" in info
