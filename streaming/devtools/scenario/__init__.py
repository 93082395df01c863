"""Routing scenario files (docs/scenarios.md): load them, validate them, play their timeline, check them.

`load_scenario` turns a YAML file into model objects and rejects bad input at load time with a
`ConfigError` that names the file, the entry and the field. `ScenarioRunner` plays the timeline with
any `Decider` (the reference engine, the Spark engine) and returns every decision in order.

The runner keeps the state that lives with the endpoints and the instance, not with a decision:

* the router's memory, with the rules of `streaming.rules.memory` (which the streaming job's state
  processor follows too): each conversation's delayed messages, held in first-delayed order (D1,
  D2), the route each unpinned conversation chose, which its later messages keep (K2), and the
  MissingRoute requests outstanding per (scope, service) (M4, B4);
* the broker instance an acknowledgement pinned a conversation to (A2, K1).

Each `RoutingBatch` carries that state to the decider. The timeline, as docs/scenarios.md describes it:

* consecutive `message` events form one batch at the current clock;
* `advance: N` moves the clock, then re-routes every conversation whose first waiting message is
  due, all its waiting messages in one batch, in first-delayed order; one delayed again is due
  `retry_s` after the new clock;
* `route`, `ack` and `mirror` events take effect at the current clock; an ack pins the
  initiator's later messages (and its waiting ones) to its broker instance;
* a batch that makes MissingRoute requests (M4, B3) is followed by one batch of request messages
  to the BCN service, ids `missing-route-N`, each sent by the database whose table asked;
* a route created or altered in that table that names the service ends the request (B6, B7).

The package, by job: `model` holds a loaded scenario (its events and tables); `loader` reads and
checks a file; `runner` plays the timeline; `check` compares the decisions with the file's `expect`.
A development and conformance tool: the streaming job does not import it.
"""
