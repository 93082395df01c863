"""Tools for development, demos and conformance, kept apart from what the streaming job runs.

`embedded_kafka` runs a real Kafka broker (or a small cluster) from the Maven jars, for
`router kafka start`, `router demo` and the tests; `spark_cluster` runs a Spark standalone master
and workers on this machine (`router spark cluster`, the cluster tests, the bench's scaling step);
`scenario` loads routing scenario files, plays
them on either engine and checks their expectations (`router resolve`, the conformance suite). The
job (`streaming.spark`), the rules, the tables and the Kafka clients import nothing from here:
tests/unit/test_layout.py holds them to it.
"""
