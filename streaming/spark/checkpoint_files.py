"""Where the driver reads and writes a checkpoint's files: its own file system, or a Hadoop one.

A router's `checkpoint_dir` is a plain path (the driver's file system: a local disk, or a folder
every node of a cluster mounts at the same path) or the URL of a Hadoop file system every node
reaches (`hdfs://namenode:8020/router/i1`; `s3a://`, `abfs://`, `gs://` go through the same code
when their connector is on the classpath, though only HDFS is tested).

A plain path stays a `pathlib.Path`, read and written as before: no JVM, so `router checkpoint
show` on a local folder needs no Spark. A URL becomes a `HadoopPath`, the few operations the
checkpoint's readers and repairs use (list, read text, write text through a rename, delete), done
through Hadoop's `FileSystem` API in the driver's JVM, with the session's Hadoop configuration:
the same file system Spark's checkpoint file manager and state store write with.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streaming.errors import RouterError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
"""A checkpoint given as a URL (`scheme://...`) rather than as a path."""


def is_url(where: str | Path) -> bool:
    """Whether `where` is a Hadoop file system's URL (`hdfs://...`), not a plain path."""
    return isinstance(where, str) and URL.match(where) is not None


class HadoopPath:
    """A file or folder of a Hadoop file system, with the part of `pathlib.Path` the checkpoint uses.

    That part: `/`, `name`, `stem`, `parent`, `is_dir`, `is_file`, `iterdir`, `glob`, `read_text`,
    `write_text`, `unlink`, `mkdir`.

    `fs` is the JVM's `org.apache.hadoop.fs.FileSystem` of the URL, `jvm` the py4j view of the
    driver's JVM. Errors of the file system are `RouterError`s naming the URL.
    """

    def __init__(self, url: str, fs: Any, jvm: Any) -> None:
        self.url = url.rstrip("/")
        self._fs = fs
        self._jvm = jvm

    @classmethod
    def open(cls, url: str, spark: SparkSession) -> HadoopPath:
        """The location `url`, on the file system the session's Hadoop configuration gives it."""
        jvm = spark._jvm
        if jvm is None:
            raise RouterError(f"{url}: a Hadoop file system is reached through the driver's JVM: none here")
        try:
            fs = jvm.org.apache.hadoop.fs.Path(url).getFileSystem(spark._jsc.hadoopConfiguration())
        except Exception as error:  # py4j's error carries Hadoop's reason (no such scheme, host down)
            raise RouterError(
                f"{url}: expected a Hadoop file system's URL whose file system Spark reaches (hdfs://, or "
                f"s3a:// and the like with their connector's jar): {_reason(error)}"
            ) from error
        return cls(url, fs, jvm)

    # --- names ------------------------------------------------------------------------------

    def __truediv__(self, name: str) -> HadoopPath:
        return HadoopPath(f"{self.url}/{name}", self._fs, self._jvm)

    def __str__(self) -> str:
        return self.url

    def __repr__(self) -> str:
        return f"HadoopPath({self.url!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HadoopPath) and other.url == self.url

    def __hash__(self) -> int:
        return hash(self.url)

    @property
    def name(self) -> str:
        """The last part of the path."""
        return self.url.rsplit("/", 1)[-1]

    @property
    def parent(self) -> HadoopPath:
        """The folder the path is in."""
        return HadoopPath(self.url.rsplit("/", 1)[0], self._fs, self._jvm)

    @property
    def stem(self) -> str:
        """The name without its last suffix (`3.json` -> `3`)."""
        name = self.name
        dot = name.rfind(".")
        return name[:dot] if dot > 0 else name

    # --- reading ----------------------------------------------------------------------------

    def is_dir(self) -> bool:
        """Whether the path is a folder (False when it does not exist)."""
        status = self._status()
        return status is not None and bool(status.isDirectory())

    def is_file(self) -> bool:
        """Whether the path is a file (False when it does not exist)."""
        status = self._status()
        return status is not None and bool(status.isFile())

    def exists(self) -> bool:
        """Whether the path is there."""
        return self._status() is not None

    def iterdir(self) -> Iterator[HadoopPath]:
        """The folder's entries (none when it does not exist)."""
        if not self.is_dir():
            return iter(())
        statuses = self._call("list", lambda: self._fs.listStatus(self._path()))
        return iter([self / str(status.getPath().getName()) for status in statuses])

    def glob(self, pattern: str) -> list[HadoopPath]:
        """The folder's entries whose name matches `pattern` (one level, as `fnmatch` matches)."""
        return [entry for entry in self.iterdir() if fnmatch.fnmatchcase(entry.name, pattern)]

    def read_text(self, encoding: str = "utf-8") -> str:
        """The file's content; `OSError` (as `pathlib` raises) when it cannot be read."""
        try:
            stream = self._fs.open(self._path())
            try:
                data = self._jvm.org.apache.hadoop.io.IOUtils.readFullyToByteArray(stream)
            finally:
                stream.close()
        except Exception as error:
            raise OSError(f"cannot read {self.url}: {_reason(error)}") from error
        return bytes(data).decode(encoding)

    def modified(self) -> float:
        """When the file was last written, in seconds since the epoch."""
        status = self._status()
        if status is None:
            raise RouterError(f"{self.url}: no such file")
        return int(status.getModificationTime()) / 1000.0

    # --- writing ----------------------------------------------------------------------------

    def write_text(self, text: str, encoding: str = "utf-8") -> None:
        """Write the file (replacing it), closed when this returns."""

        def write() -> None:
            stream = self._fs.create(self._path(), True)
            try:
                stream.write(bytearray(text.encode(encoding)))
            finally:
                stream.close()

        self._call("write", write)

    def unlink(self, missing_ok: bool = False) -> None:
        """Delete the file."""
        if not self._call("delete", lambda: self._fs.delete(self._path(), False)) and not missing_ok:
            raise RouterError(f"{self.url}: no such file to delete")

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        """Make the folder (Hadoop makes the missing parents in any case)."""
        self._call("make", lambda: self._fs.mkdirs(self._path()))

    def remove_tree(self) -> None:
        """Delete the folder and all it holds, if it is there."""
        self._call("delete", lambda: self._fs.delete(self._path(), True))

    def replace(self, target: HadoopPath) -> None:
        """Rename this file to `target`, replacing it.

        Hadoop's `rename` does not replace a file: `target` is deleted first. The two steps are not
        one (a crash between them leaves `target` missing); the checkpoint's writers only replace
        files a restart may go without (`streaming.spark.rotation`).
        """
        self._call("delete", lambda: self._fs.delete(target._path(), False))
        if not self._call("rename", lambda: self._fs.rename(self._path(), target._path())):
            raise RouterError(f"{self.url}: could not be renamed to {target.url}")

    # --- the JVM ----------------------------------------------------------------------------

    def _path(self) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(self.url)

    def _status(self) -> Any:
        path = self._path()
        if not self._call("ask about", lambda: self._fs.exists(path)):
            return None
        return self._call("ask about", lambda: self._fs.getFileStatus(path))

    def _call(self, doing: str, action: Any) -> Any:
        try:
            return action()
        except Exception as error:
            raise RouterError(f"could not {doing} {self.url}: {_reason(error)}") from error


CheckpointPath = Path | HadoopPath
"""A checkpoint's file or folder: on the driver's file system, or on a Hadoop one."""


def locate(where: str | Path, spark: SparkSession | None = None) -> CheckpointPath:
    """A checkpoint location given as in the settings: a `Path`, or a `HadoopPath` for a URL.

    A URL needs the session whose JVM reaches its file system.
    """
    if not is_url(where):
        return Path(where)
    if spark is None:
        raise RouterError(f"{where}: a checkpoint on a Hadoop file system is read through a SparkSession")
    return HadoopPath.open(str(where), spark)


def remove_tree(folder: CheckpointPath) -> None:
    """Delete `folder` and all it holds, if it is there."""
    if isinstance(folder, HadoopPath):
        folder.remove_tree()
    else:
        shutil.rmtree(folder, ignore_errors=True)


def modified(path: CheckpointPath) -> float:
    """When the file `path` was last written, in seconds since the epoch."""
    return path.modified() if isinstance(path, HadoopPath) else path.stat().st_mtime


def write_atomically(path: CheckpointPath, text: str) -> None:
    """Write `text` to `path` through a temporary file renamed into place (a reader sees all or nothing)."""
    if isinstance(path, HadoopPath):
        partial = path.parent / f".{path.name}.tmp"
        partial.write_text(text)
        partial.replace(path)
    else:
        local = path.parent / f".{path.name}.tmp"
        local.write_text(text, encoding="utf-8")
        os.replace(local, path)


def _reason(error: BaseException) -> str:
    """A py4j error's Java reason in one line (its first), else the error's text."""
    java = getattr(error, "java_exception", None)
    text = str(java.toString()) if java is not None else str(error)
    return text.strip().splitlines()[0] if text.strip() else type(error).__name__
