"""The streaming query's checkpoint: what a job that stopped left behind, made fit to resume.

A query's checkpoint holds its offset log (the batches planned), its commit log (the batches
written and committed) and Spark's state store (the conversation memory). A job killed at any
moment leaves them consistent, with two exceptions Spark 4.1.1 does not resume from, which
`drop_uncommitted_batch` repairs before the query starts.
"""

from __future__ import annotations

import shutil
from pathlib import Path


def logged_batches(log: Path) -> list[int]:
    """The batch ids a query's offset or commit log holds (its files named by number)."""
    return [int(p.name) for p in log.glob("[0-9]*")] if log.is_dir() else []


def drop_uncommitted_batch(checkpoint: Path) -> int | None:
    """Remove the offset-log entry of a batch that was planned but never committed; return its id.

    After a crash the query would run that batch again from the logged offsets, without asking the
    Kafka source for its latest offsets first, and Spark 4.1.1's Kafka source then fails the
    batch's progress report with a NullPointerException (SPARK-55271), after the batch's output
    is written: the job stops once more at every such restart. Without the entry the batch is
    planned again from the last committed offsets, as a new batch with the same id. Delivery stays
    at least once: records the lost attempt wrote may be written again, none is skipped.

    When no batch was ever committed, the query starts anew, and Spark wants an empty state folder
    for a first batch: what a lost first attempt wrote under `state/` is removed, also when it was
    killed before it logged its offsets (the state's schema files are written while planning).
    Temporary files of a log entry that was being written are removed too.
    """
    offsets, commits = checkpoint / "offsets", checkpoint / "commits"
    for folder in (offsets, commits):
        # A log file being written when the job died stays behind as `.N.<uuid>.tmp` (and its
        # `.crc`); Spark refuses a first batch whose commit log holds any file.
        for leftover in folder.iterdir() if folder.is_dir() else ():
            if ".tmp" in leftover.name:
                leftover.unlink(missing_ok=True)
    planned, done = logged_batches(offsets), logged_batches(commits)
    if not done:
        shutil.rmtree(checkpoint / "state", ignore_errors=True)
    if not planned or max(planned) <= max(done, default=-1):
        return None
    last = max(planned)
    for path in (offsets / str(last), offsets / f".{last}.crc"):
        path.unlink(missing_ok=True)
    return last


OLD_STATE_OPERATOR = "flatMapGroupsWithState"
"""The operator that kept the conversation memory before `transformWithState` (its timers)."""


def holds_old_state(checkpoint: Path) -> bool:
    """Whether the checkpoint's conversation memory was written by `OLD_STATE_OPERATOR`.

    Spark names the stateful operator in the state's metadata (`state/0/_metadata/metadata`); a
    query with another operator cannot resume that state.
    """
    try:
        metadata = (checkpoint / "state" / "0" / "_metadata" / "metadata").read_text(encoding="utf-8")
    except OSError:
        return False
    return f'"{OLD_STATE_OPERATOR}"' in metadata
