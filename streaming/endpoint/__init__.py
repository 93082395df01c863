"""Endpoints: the services at both ends of a dialog, talking through the router (docs/rules.md §1.8, §1.16).

`streaming.endpoint.protocol` holds the dialog protocol's decisions (pure), `store` an endpoint's
durable memory (SQLite), `endpoint` the Kafka side (confluent-kafka and fastavro, no Spark).
"""

from streaming.endpoint.endpoint import Dialog, Endpoint, Received
from streaming.endpoint.metrics import EndpointCounts
from streaming.endpoint.store import DialogClosed

__all__ = ["Dialog", "DialogClosed", "Endpoint", "EndpointCounts", "Received"]
