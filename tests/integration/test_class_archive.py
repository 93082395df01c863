"""The driver JVM maps the class archive `make setup` recorded (`streaming.spark.session.archive_options`),
and runs with the flags `ROUTER_JVM_OPTIONS` adds (`streaming.spark.session.env_jvm_options`).

The archive only helps if the JVM really maps it: one recorded with another classpath is ignored
silently (`tests.class_archive`). A cluster's driver is checked in tests/e2e/test_cluster_faults.py.
"""

from __future__ import annotations

import os

import pytest
from pyspark.sql import SparkSession

from streaming.jars import driver_class_archive
from streaming.spark.session import CLASS_ARCHIVE_ENV, env_jvm_options
from tests.class_archive import archive_mappings
from tests.conftest import SERIAL_COLLECTOR, TEST_COMPILER

pytestmark = pytest.mark.integration


def test_the_driver_jvm_maps_the_class_archive_make_setup_recorded(spark: SparkSession) -> None:
    if os.environ.get(CLASS_ARCHIVE_ENV) == "off":
        pytest.skip(f"{CLASS_ARCHIVE_ENV}=off: set-up recorded no class archive and the driver uses none")
    archive = driver_class_archive()
    assert archive.is_file(), f"make setup recorded no class archive at {archive}"
    assert spark._jvm is not None
    pid = spark._jvm.java.lang.ProcessHandle.current().pid()
    assert archive_mappings(pid), (
        f"the driver JVM did not map {archive} (its classpath differs from the recording's?)"
    )


def test_the_driver_jvm_runs_with_the_flags_router_jvm_options_gives(spark: SparkSession) -> None:
    """`ROUTER_JVM_OPTIONS` reaches the driver JVM (the suite sets it: `tests/conftest.py`)."""
    assert spark._jvm is not None
    runtime = spark._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    arguments = list(runtime.getInputArguments())
    flags = env_jvm_options()
    if flags:
        assert all(flag in arguments for flag in flags), (flags, arguments)
    else:  # `ROUTER_JVM_OPTIONS=` empty: the JVM runs with the router's own flags and no more
        assert TEST_COMPILER not in arguments
    # The collector the flags leave is the one the JVM runs: serial's, which replaces the router's
    # parallel one, if the flags ask for it (as the suite's do).
    beans = spark._jvm.java.lang.management.ManagementFactory.getGarbageCollectorMXBeans()
    collectors = sorted(str(bean.getName()) for bean in beans)
    serial = ["Copy", "MarkSweepCompact"]
    assert (collectors == serial) == (SERIAL_COLLECTOR in flags), (flags, collectors)
