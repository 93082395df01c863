"""What a JVM has mapped of the driver's class archive (`streaming.spark.session.archive_options`).

`jcmd <pid> VM.info` lists the files the JVM has mapped. The archive only helps when the JVM maps
it: one recorded with another classpath is ignored, silently.
"""

from __future__ import annotations

import shutil
import subprocess

from streaming.jars import driver_class_archive


def archive_mappings(pid: int) -> list[str]:
    """The lines of `jcmd PID VM.info` that map the class archive `make setup` recorded."""
    jcmd = shutil.which("jcmd")
    assert jcmd is not None, "the JDK's jcmd is needed to see what the JVM mapped"
    info = subprocess.run([jcmd, str(pid), "VM.info"], capture_output=True, text=True, timeout=60).stdout
    assert "CDS: on" in info, f"the JVM {pid} runs without class data sharing"
    archive = str(driver_class_archive())
    return [line for line in info.splitlines() if line.rstrip().endswith(archive)]
