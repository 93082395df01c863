"""The session's JVM writes to stderr through the router: its lines pass, the launcher's notice does not."""

from __future__ import annotations

import os
import threading

import pytest

from streaming.spark.session import relay_stderr


def test_the_jvms_lines_reach_stderr_in_order_without_the_incubator_notice(
    capfd: pytest.CaptureFixture[str],
) -> None:
    read, write = os.pipe()
    relay = relay_stderr(os.fdopen(read, "rb"))
    with os.fdopen(write, "wb") as jvm:
        jvm.write(b"WARNING: Using incubator modules: jdk.incubator.vector\n")
        jvm.write(b"12:00:00.000 ERROR MicroBatchExecution: the query failed\n")
        jvm.write(b"Error occurred during initialization of VM\n")
        jvm.write(b"a last line with no newline")
    relay.join(timeout=10)
    assert not relay.is_alive()  # the JVM's end closed: the relay ends
    assert capfd.readouterr().err == (
        "12:00:00.000 ERROR MicroBatchExecution: the query failed\n"
        "Error occurred during initialization of VM\n"
        "a last line with no newline"
    )


def test_the_relay_keeps_draining_when_stderr_is_gone(capfd: pytest.CaptureFixture[str]) -> None:
    # A relay that ended on a failed write would close the JVM's stderr under it for good.
    read, write = os.pipe()

    written: list[int] = []

    def log_much() -> None:
        with os.fdopen(write, "wb") as jvm:
            for i in range(10_000):  # far more than a pipe's buffer holds
                jvm.write(f"line {i} of a JVM that logs much\n".encode())
                written.append(i)

    jvm = threading.Thread(target=log_much, daemon=True)
    saved = os.dup(2)
    os.close(2)  # this process's stderr gone: each write fails
    try:
        relay = relay_stderr(os.fdopen(read, "rb"))
        jvm.start()
        jvm.join(timeout=10)
        relay.join(timeout=10)
        ended = not jvm.is_alive(), not relay.is_alive()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    assert ended == (True, True)
    assert len(written) == 10_000  # no line refused: the relay read on, rather than end its pipe
