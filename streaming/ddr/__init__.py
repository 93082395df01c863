"""Data-dependent routing: a service that sends each conversation where its first message says.

When data is partitioned (sales by region, one service per region), routes cannot say where a
message goes: what is inside it does. A routing service is a service
like any other, hosted in a database of an instance: initiators begin dialogs with it, and it
classifies the first message of each with a classifier, a Spark SQL expression over the message
(`streaming.spark.classifier`), to find the target service. Then, in `forward` mode:

* it begins a dialog with the target service (routed by the ordinary rules), keeps the mapping of
  the inbound dialog to the outbound one (its `resolved_conversations` table), and forwards the
  message; later messages of the inbound dialog follow the mapping, unclassified;
* what the target sends back on the outbound dialog goes back on the inbound one;
* EndDialog on either side ends the other side too, and an Error on either side ends the other with
  an Error that wraps it; the mapping goes with them;
* a first message the classifier fails on, or finds no service in, ends the inbound dialog with an
  Error that says why (code `CLASSIFY_FAILED`).

In `redirect` mode it forwards nothing: it answers the first message with a `REDIRECT_MESSAGE_TYPE`
message naming the target service (and broker instance) and ends the dialog; the initiator begins
a dialog with the target itself (`parse_redirect` reads the answer).

The service is an `Endpoint` (acks, resends, order: docs/rules.md §1.8), and each batch of messages
it takes is handled in one transaction of the endpoint's store, with the mappings in the same file:
a service killed at any moment takes the batch again at its next start, and begins the same outbound
dialogs again (their ids are derived from the inbound ones), so the targets drop the repeats (A4) and no
message is lost or forwarded twice. Several routing services behind equal routes share the
conversations round-robin (C5). Given `metrics_port`, the service serves `/metrics` (its answers by
`answered_with`, its classifications, and its endpoint's figures: `streaming.observe.ddr_metrics`)
and `/healthz` (200 while its loop polls and Kafka answers) until `close`. A routing service file:

    # routes/ddr/sales.yaml
    routing_service:
      service: SalesRouter            # the service initiators begin dialogs with
      database: Sales                 # the database of the instance that hosts it
      mode: forward                   # or redirect
      classifier: "xpath_string(cast(body as string), '/message/toServiceName')"
      lifetime_s: 3600                # of each outbound dialog (optional: no

The package, by job: `config` reads a routing service file; `answers` is what the service does with
one message, as pure functions; `store` keeps the mappings in the endpoint's SQLite file; `service`
is the Kafka service that takes messages, classifies, answers and commits.
"""
