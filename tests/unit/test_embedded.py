"""The embedded broker's pure helpers (no broker started here)."""

from __future__ import annotations

from streaming.kafka.embedded import new_cluster_id


def test_kafka_cluster_ids_never_look_like_an_option() -> None:
    """kafka-storage reads an id starting with '-' as a flag; the broker would then never start."""
    ids = [new_cluster_id() for _ in range(5000)]
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
