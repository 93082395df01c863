"""The demo's data: `routes/demo/`'s catalogs and routes loaded under a prefix, and its traffic sent.

`router demo` loads them before it routes, and so does the recording of the driver's class archive
(`streaming.devtools.class_archive`). Conversations start from i1's AdventureWorks database and go
to OrderParts on i2 (through the forwarder f1), to the local AuditService, and to a service nobody
hosts, in the `SERVICES` proportions.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from pathlib import Path

from streaming import topics
from streaming.kafka.avro import new_message_record
from streaming.tables.loading import load_catalog_files, load_route_files
from streaming.tables.topic_io import publish_catalogs, publish_routes, send_records

SERVICES = (("OrderParts", 0.5), ("AuditService", 0.4), ("NoSuchService", 0.1))
"""The services the demo's conversations go to, with each one's share."""


def load_demo(bootstrap: str, prefix: str, data: Path, conversations: int, messages: int) -> tuple[int, int]:
    """Load the demo's catalogs and routes from `data` under `prefix` and send its traffic from i1/AW.

    Returns how many catalogs were loaded and how many messages were sent.
    """
    now = datetime.now(timezone.utc)
    instances = load_catalog_files([data / "catalogs.yaml"])
    publish_catalogs(bootstrap, instances, topics.catalogs_topic(prefix))
    publish_routes(bootstrap, load_route_files([data / "routes.yaml"], now=now), topics.routes_topic(prefix))
    records = []
    for c in range(conversations):
        service = _service_for(c)
        conversation = str(uuid.uuid4())
        for n in range(messages):
            records.append(
                new_message_record(
                    message_id=f"{conversation}:{n}",
                    conversation_id=conversation,
                    sequence_number=n,
                    to_service=service,
                    from_service="InitiatorService",
                    origin_database="AW",
                    enqueued_at=now,
                    body=f"<order n='{c}.{n}'/>".encode(),
                )
            )
    return len(instances), send_records(bootstrap, topics.outbound_topic("i1", prefix), records)


def _service_for(conversation: int) -> str:
    """Spread conversations over the demo's services in the SERVICES proportions."""
    slot = (conversation % 10) / 10
    total = 0.0
    for service, share in SERVICES:
        total += share
        if slot < total:
            return service
    return SERVICES[-1][0]
