"""More JVM flags, given in an environment variable.

The C1-only compiler and the serial collector the test suite's JVMs run with (`tests/conftest.py`),
a collector's log, native memory tracking (`bench.soak`).
"""

from __future__ import annotations

import os

from streaming.errors import RouterError

SPARK_JVM_OPTIONS_ENV = "ROUTER_JVM_OPTIONS"
"""For the Spark JVMs: the driver's and the executors' (`streaming.spark.session`), and the
daemons of a standalone cluster started here (`streaming.devtools.spark_cluster`)."""

KAFKA_JVM_OPTIONS_ENV = "ROUTER_KAFKA_JVM_OPTIONS"
"""For the embedded broker's JVM (`streaming.devtools.embedded_kafka`)."""


def flags_from_env(variable: str) -> list[str]:
    """The flags `variable` holds, separated by spaces, in order; unset or blank, none.

    A word that does not start with '-' is refused with a hint: the JVM would take it for its main
    class and not start.
    """
    words = os.environ.get(variable, "").split()
    strays = [w for w in words if not w.startswith("-")]
    if strays:
        raise RouterError(
            f"{variable}: {', '.join(map(repr, strays))} is not a JVM flag; hint: give flags "
            "separated by spaces, each starting with '-' (-Xlog:gc, -Xss2m)"
        )
    return words
