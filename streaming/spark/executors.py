"""The executors a job on a Spark cluster gains and loses, said in one line each.

When a worker dies, Spark runs the tasks its executors held again on the executors left (and asks
the cluster manager for new ones); it logs the loss from several classes, at ERROR and WARN, some
with stack traces, which `log4j2.properties` keeps quiet unless the command runs with --verbose.
`ExecutorWatch` says the change instead, from Spark's own listener events
(`router.metrics.ExecutorChanges`, jvm/state): the job calls `report()` as it waits for batches.
"""

from __future__ import annotations

import logging

from pyspark.sql import SparkSession

from streaming.spark.session import session_jvm

DRIVER = "driver"
"""The executor id of local mode's one executor, the driver itself: never lost while the job runs."""


def change_line(change: str) -> str | None:
    """A person's line for one `ExecutorChanges` line; None for the driver's own executor."""
    kind, executor, *rest = change.split("\t")
    if executor == DRIVER:
        return None
    if kind == "removed":
        reason = rest[0] if rest and rest[0] else "no reason given"
        return (
            f"Spark executor {executor} lost ({reason}); its tasks run again on the executors left, "
            "and the micro-batch goes on"
        )
    host, cores = [*rest, "?", "?"][:2]
    return f"Spark executor {executor} joined on {host} ({cores} core(s))"


class ExecutorWatch:
    """Says each executor added or removed since the last `report()`, once."""

    def __init__(self, spark: SparkSession, log: logging.Logger) -> None:
        self._changes = session_jvm(spark, "watching executors needs").router.metrics.ExecutorChanges.install(
            spark._jsc.sc()
        )
        self._log = log

    def report(self) -> None:
        """Log a line per change Spark's listener bus has delivered since the last call."""
        for change in str(self._changes.take()).splitlines():
            line = change_line(change)
            if line is not None:
                self._log.warning("%s", line)
