"""K2 in the streaming job: the route each unpinned conversation chose, kept by the JVM.

An initiator's message without a broker instance keeps the route its conversation chose before
(spec K2; `streaming.rules.batch`). The job keeps those choices as DataFrames that never pass
through Python: one row per (instance, conversation, origin database, target service) with the C0
identity of the route, when it was chosen and in which batch (`CHOICE_SCHEMA`, `k_at`, `k_batch`).
Each batch joins them by key and adds the choices it changed (`k_change`): first choices, and new
ones of conversations whose kept route is gone.

Saved with the checkpoint, so a restart resumes them: a batch that changed choices writes them as
a Parquet segment `seg-<batch id>` before it ends (a batch run again after a failure rewrites its
own segment) and reads it back, cached. Every `COMPACT_EVERY` batches, and at once when a batch
chose again for a conversation that had a choice, the base and the segments are merged into
`base-<next batch id>`: one row per key (the latest batch wins), partitioned by key; the files it
covers are removed. At start the newest base and the segments after it are read and merged.

A choice is kept `keep_s` seconds after it was made and dropped at the next merge: a conversation
still unpinned then chooses again and keeps that choice. Once acknowledged (A2), a conversation's
messages carry a broker instance and its row is no longer read; it ages out.
"""

from __future__ import annotations

import logging
import re
import shutil
from datetime import datetime, timedelta
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from streaming.spark.engine import CHOICE_IDENTITY_COLUMNS, CHOICE_KEY_COLUMNS, CHOICE_SCHEMA

log = logging.getLogger("streaming.choices")

COMPACT_EVERY = 20
"""Batches between two merges of the segments into one base."""

_FILE = re.compile(r"^(base|seg)-(\d{12})$")
_SAVED_SCHEMA = ", ".join(f"{f.name} string" for f in CHOICE_SCHEMA.fields) + ", k_at timestamp, k_batch long"


class ChoiceStore:
    """The kept choices of one job: a merged base and the segments of the batches since."""

    def __init__(self, spark: SparkSession, directory: Path, keep_s: float, partitions: int) -> None:
        self.spark = spark
        self.directory = directory
        self.keep = timedelta(seconds=keep_s)
        self.partitions = max(1, partitions)
        self.frames: list[DataFrame] = []
        """The base (if any) then one frame per segment since; no key is in two of them."""

    def load(self, now: datetime) -> None:
        """Read back the newest base and the segments after it, merged into one frame."""
        files = self._files()
        since = max((batch for kind, batch, _ in files if kind == "base"), default=-1)
        paths = [
            str(path)
            for kind, batch, path in files
            if (kind == "base" and batch == since) or (kind == "seg" and batch >= since)
        ]
        if paths:
            saved = self.spark.read.schema(_SAVED_SCHEMA).parquet(*paths)
            self._replace(self._latest(saved, now).localCheckpoint(eager=True))
            log.info("kept choices: %d read back from %d file(s)", self.count(), len(paths))

    def lookup(self) -> DataFrame | None:
        """The choices for `batch_context` (CHOICE_SCHEMA, one row per key), or None while there are none."""
        saved = self._saved()
        return None if saved is None else saved.select(*CHOICE_SCHEMA.fieldNames())

    def count(self) -> int:
        """How many choices are kept (a Spark job: for logs and tests)."""
        saved = self._saved()
        return 0 if saved is None else saved.count()

    def record(self, decided: DataFrame, batch_id: int, now: datetime, first: int, again: int) -> None:
        """Keep a batch's changed choices: `first` first choices, `again` replaced ones (`k_change`)."""
        if first or again:
            changed = (
                decided.where(F.col("k_change").isNotNull())
                .select(
                    F.col("instance").alias("k_instance"),
                    F.col("conversation_id").alias("k_conversation_id"),
                    F.col("origin").alias("k_origin"),
                    F.col("service").alias("k_service"),
                    *CHOICE_IDENTITY_COLUMNS,
                    F.lit(now.replace(tzinfo=None)).cast("timestamp").alias("k_at"),
                    F.lit(batch_id).cast("long").alias("k_batch"),
                )
                # Every message with one key decides alike within a batch (streaming.rules.batch).
                .dropDuplicates(list(CHOICE_KEY_COLUMNS))
            )
            segment = self.directory / f"seg-{batch_id:012d}"
            changed.write.mode("overwrite").parquet(str(segment))
            self.frames.append(self.spark.read.schema(_SAVED_SCHEMA).parquet(str(segment)).cache())
        # A replaced choice leaves its key in two frames: merge before the next lookup.
        if again or ((batch_id + 1) % COMPACT_EVERY == 0 and self.frames):
            self._compact(batch_id, now)

    def _compact(self, batch_id: int, now: datetime) -> None:
        """Merge everything into `base-<batch id + 1>` and remove the files it covers."""
        saved = self._saved(ordered=True)
        if saved is None:
            return
        base = self.directory / f"base-{batch_id + 1:012d}"
        self._latest(saved, now).write.mode("overwrite").parquet(str(base))
        self._replace(self.spark.read.schema(_SAVED_SCHEMA).parquet(str(base)).cache())
        for kind, batch, path in self._files():
            if (kind == "seg" and batch <= batch_id) or (kind == "base" and path != base):
                shutil.rmtree(path, ignore_errors=True)

    def _latest(self, saved: DataFrame, now: datetime) -> DataFrame:
        """One row per key, the latest batch's, less the choices older than `keep`; by key.

        A batch run again after a restart rewrites its segment: of two rows of one batch, the
        one in the later frame (`_frame`, when given) is the newer.
        """
        if "_frame" not in saved.columns:
            saved = saved.withColumn("_frame", F.lit(0))
        latest = Window.partitionBy(*CHOICE_KEY_COLUMNS).orderBy(
            F.col("k_batch").desc(), F.col("_frame").desc()
        )
        oldest = F.lit((now - self.keep).replace(tzinfo=None)).cast("timestamp")
        return (
            saved.withColumn("_n", F.row_number().over(latest))
            .where((F.col("_n") == 1) & (F.col("k_at") > oldest))
            .drop("_n", "_frame")
            .repartition(self.partitions, *CHOICE_KEY_COLUMNS)
        )

    def _saved(self, ordered: bool = False) -> DataFrame | None:
        """All frames as one; `ordered` numbers each row's frame in `_frame` (later = newer)."""
        frames = [f.withColumn("_frame", F.lit(i)) if ordered else f for i, f in enumerate(self.frames)]
        if not frames:
            return None
        table = frames[0]
        for frame in frames[1:]:
            table = table.unionByName(frame)
        return table

    def _replace(self, base: DataFrame) -> None:
        for frame in self.frames:
            frame.unpersist()
        self.frames = [base]

    def _files(self) -> list[tuple[str, int, Path]]:
        """Complete saved files (a `_SUCCESS` marker), as (kind, batch id, path), oldest first."""
        if not self.directory.exists():
            return []
        found = []
        for path in self.directory.iterdir():
            match = _FILE.match(path.name)
            if match and (path / "_SUCCESS").exists():
                found.append((match.group(1), int(match.group(2)), path))
        return sorted(found, key=lambda f: (f[1], f[0] == "seg"))
