"""How the router is seen from outside: what its processes serve and what its commands read.

`server`: `/metrics` (Prometheus) and `/healthz`, served the same way by every long-running process:
the job (`streaming.spark.metrics`), the dynamic routing service (`directory_metrics`), a
data-dependent routing service (`ddr_metrics`) and an endpoint (`streaming.endpoint.metrics`), whose serve
loops are judged alike (`services`). `status`: `router status`, each instance's router as Kafka
shows it; `explain`: `router explain`, one message's path through the instances.
"""
