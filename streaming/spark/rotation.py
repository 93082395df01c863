"""The rotation counters of C5 and M3 in the streaming job, kept with the query's checkpoint.

New conversations take equal options in turn (`streaming.rules.choice.Rotation`), and the turn runs
on from one micro-batch to the next, so the driver keeps the counters: it sets them in the
decision's inputs before a batch and takes back what the batch advanced (the batch is decided in
one pass then, `SnapshotFlags.spreads`). A batch that advanced a counter writes them all to
`rotation/<batch id>.json` in the query's checkpoint before it ends, that is before Spark commits
it: one version per batch, as Spark's state store keeps its own. A start reads the version of the
last committed batch (or the latest before it) and removes those of batches never committed, so a
batch run again after a crash starts from the counters its first attempt started from, and a
restart continues the rotation where the committed batches left it. The checkpoint may be on a
Hadoop file system (`streaming.spark.checkpoint_files`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from streaming.errors import RouterError
from streaming.spark.checkpoint import logged_batches
from streaming.spark.checkpoint_files import CheckpointPath, write_atomically

KEPT_VERSIONS = 2
"""Versions kept: the last, and the one before it (the last may belong to a batch never committed)."""


class RotationStore:
    """The counters by instance, then by rotation key; versioned by batch in `folder`."""

    def __init__(
        self, folder: CheckpointPath, counters: Mapping[str, Mapping[str, int]] | None = None
    ) -> None:
        self.folder = folder
        self.counters: dict[str, dict[str, int]] = {i: dict(keys) for i, keys in (counters or {}).items()}

    @classmethod
    def load(cls, checkpoint: CheckpointPath) -> RotationStore:
        """The counters as the last committed batch of the query at `checkpoint` left them."""
        folder = checkpoint / "rotation"
        committed = max(logged_batches(checkpoint / "commits"), default=-1)
        versions = _versions(folder)
        for batch_id, path in versions.items():
            if batch_id > committed:
                path.unlink(missing_ok=True)  # written by a batch that was not committed
        kept = [b for b in versions if b <= committed]
        if not kept:
            return cls(folder)
        path = versions[max(kept)]
        try:
            counters = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise RouterError(
                f"the rotation counters in {path} cannot be read ({error}); remove the file to start "
                "every rotation of equal routes (C5, M3) again at its first route"
            ) from error
        return cls(folder, counters)

    def advance(self, batch_id: int, advanced: Mapping[str, Mapping[str, int]]) -> None:
        """Take on what batch `batch_id` advanced, and write the counters as that batch's version."""
        if not advanced:
            return
        for instance, keys in advanced.items():
            self.counters.setdefault(instance, {}).update(keys)
        self.folder.mkdir(parents=True, exist_ok=True)
        write_atomically(self.folder / f"{batch_id}.json", json.dumps(self.counters, sort_keys=True))
        older = sorted(b for b in _versions(self.folder) if b < batch_id)
        for old in older[: max(0, len(older) - (KEPT_VERSIONS - 1))]:
            (self.folder / f"{old}.json").unlink(missing_ok=True)


def _versions(folder: CheckpointPath) -> dict[int, CheckpointPath]:
    if not folder.is_dir():
        return {}
    return {int(p.stem): p for p in folder.glob("[0-9]*.json")}
