"""The session's local file system (`router.fs.LocalFileSystem`, `session.local_conf`): the files a
checkpoint writes get the permissions Hadoop asks for, with checksums, when it sets them through
java.nio instead of a `chmod` process."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from streaming.spark.session import CHECKPOINT_FILE_MANAGER, LOCAL_FILE_SYSTEM

pytestmark = pytest.mark.integration


def _local_fs(spark: SparkSession) -> tuple[Any, Any]:
    """The driver's JVM and its local Hadoop file system (py4j proxies)."""
    jvm = spark._jvm
    assert jvm is not None
    conf = spark._jsc.hadoopConfiguration()
    return jvm, jvm.org.apache.hadoop.fs.FileSystem.get(jvm.java.net.URI("file:///"), conf)


def test_the_session_uses_the_router_file_system_and_checkpoint_manager(spark: SparkSession) -> None:
    _, fs = _local_fs(spark)
    assert fs.getClass().getName() == LOCAL_FILE_SYSTEM
    assert spark.conf.get("spark.sql.streaming.checkpointFileManagerClass") == CHECKPOINT_FILE_MANAGER


@pytest.mark.parametrize("mode", [0o640, 0o600, 0o755, 0o444])
def test_a_file_created_gets_the_permission_asked_for_and_a_checksum(
    spark: SparkSession, tmp_path: Path, mode: int
) -> None:
    jvm, fs = _local_fs(spark)
    path = tmp_path / "offsets" / "0"
    permission = jvm.org.apache.hadoop.fs.permission.FsPermission(mode)
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path.as_uri())
    out = fs.create(hadoop_path, permission, True, 4096, 1, 1024 * 1024, None)
    out.write(b"v1\n")
    out.close()
    permissions = jvm.org.apache.hadoop.fs.permission.FsPermission
    umask = permissions.getUMask(spark._jsc.hadoopConfiguration()).toShort()
    assert stat.S_IMODE(path.stat().st_mode) == mode & ~umask
    assert path.read_bytes() == b"v1\n"
    assert (path.parent / ".0.crc").is_file()  # the checksums of Hadoop's local file system are kept


def test_set_permission_changes_the_mode_of_an_existing_file(spark: SparkSession, tmp_path: Path) -> None:
    jvm, fs = _local_fs(spark)
    path = tmp_path / "f"
    path.write_bytes(b"x")
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path.as_uri())
    for mode in (0o700, 0o604, 0o070):
        fs.setPermission(hadoop_path, jvm.org.apache.hadoop.fs.permission.FsPermission(mode))
        assert stat.S_IMODE(path.stat().st_mode) == mode
