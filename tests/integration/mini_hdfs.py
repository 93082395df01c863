"""A real HDFS for the tests: Hadoop's MiniDFSCluster (one namenode, one datanode) in a JVM of its own.

`scripts/setup.sh` copies `hadoop-client-minicluster` (jvm/hdfs-test/pom.xml, the version of the
Hadoop client pyspark bundles) into `.cache/jars/hdfs-test/` and compiles `router.hdfs.MiniHdfs`
(jvm/hdfs-test/src) into `.cache/jars/hdfs-test-main/`. The cluster runs on pyspark's own
hadoop-client-api and -runtime jars, listens on 127.0.0.1 only, keeps its blocks in a temporary
folder and its log in `mini-hdfs.log` there; `MiniHdfs` starts it, waits until the namenode
answers, and stops it on leaving (a test module's fixture: tests/integration/test_hdfs_checkpoint.py).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit

import pytest

from streaming.jars import cache_dir

START_S = 120.0
"""How long the cluster may take to start (5 s alone on 2 cores; more when the machine is shared)."""

PYSPARK_JARS = (
    "hadoop-client-api-",
    "hadoop-client-runtime-",
    "slf4j-api-",
    "jcl-over-slf4j-",
    "log4j-api-",
    "log4j-core-",
    "log4j-slf4j2-impl-",
    "log4j-1.2-api-",
)
"""The jars of pyspark's own the cluster runs on: Hadoop's client, and the logging it writes through."""


def classpath() -> list[Path]:
    """The MiniHdfs jar, the minicluster's jars and pyspark's Hadoop client and logging jars."""
    import pyspark

    pyspark_jars = Path(pyspark.__file__).parent / "jars"
    ours = [*sorted((cache_dir() / "jars" / "hdfs-test-main").glob("*.jar"))]
    minicluster = sorted((cache_dir() / "jars" / "hdfs-test").glob("*.jar"))
    if not ours or not minicluster:
        raise pytest.UsageError(
            f"expected the tests' HDFS jars in {cache_dir() / 'jars'}/hdfs-test{{,-main}}: run `make setup`"
        )
    theirs = [jar for jar in sorted(pyspark_jars.glob("*.jar")) if jar.name.startswith(PYSPARK_JARS)]
    return [*ours, *minicluster, *theirs]


class MiniHdfs:
    """A MiniDFSCluster in its own JVM, for a `with` block: `url` is its namenode's `hdfs://` URL."""

    def __init__(self, storage: Path, port: int = 0) -> None:
        self.storage = storage
        self.port = port
        self.url = ""
        self.log = storage / "mini-hdfs.log"
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> MiniHdfs:
        ready = self.storage / "ready"
        command = [
            "java",
            "-Xmx512m",
            "-cp",
            os.pathsep.join(str(jar) for jar in classpath()),
            "router.hdfs.MiniHdfs",
            str(self.storage / "data"),
            str(self.port),
            str(ready),
        ]
        with self.log.open("wb") as log:
            self._process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=log, stderr=log)
        deadline = time.monotonic() + START_S
        try:
            while not ready.is_file():
                if self._process.poll() is not None:
                    raise RuntimeError(
                        f"the MiniDFSCluster exited with {self._process.returncode}: {self._tail()}"
                    )
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the MiniDFSCluster did not start in {START_S:.0f} s: {self._tail()}")
                time.sleep(0.2)
            self.url = ready.read_text(encoding="utf-8").strip()
            address = urlsplit(self.url)
            assert address.hostname == "127.0.0.1" and address.port, self.url
            with socket.create_connection((address.hostname, address.port), timeout=10):
                pass  # the namenode answers
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop()

    def _stop(self) -> None:
        """Close the cluster's standard input (it shuts down and exits); end it if it does not."""
        process, self._process = self._process, None
        if process is None:
            return
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def _tail(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")[-3000:] or "(its log is empty)"
