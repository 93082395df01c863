"""The health of the services' serve loops: `router directory serve`, `router ddr serve`, an `Endpoint`.

Each of them is a loop that polls Kafka: the directory service's consumer, the routing service's
endpoint, an endpoint's `pump`. Its health is whether that loop still works:

    200  the loop polled within the bound (30 s by default), and Kafka answered it within the bound
    503  the loop stopped (with why), has not polled yet or not within the bound, or Kafka has not
         answered it yet or not within the bound (the broker is away: with what the client last said)

A consumer's poll returns on time while the broker is away (it reconnects in the background and
hands nothing over), so polling alone does not show an outage: while idle, a loop whose health is
served asks Kafka for its queue topic's metadata every `ASK_KAFKA_EVERY_S` (a third of the bound
when that is shorter: `LoopWatch.kafka_due`), a request that fails within `ASK_KAFKA_TIMEOUT_S` when
no broker answers.

`LoopWatch` is set by the loop's thread and read by the metrics server's; `judge_loop`, a pure
function of what it holds and the time, makes the judgement. The body says which instance and
service, what the loop last did and when.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from confluent_kafka import Consumer, KafkaError, KafkaException

from streaming.errors import ConfigError
from streaming.observe.server import Health

HEALTH_BOUND_S = 30.0
"""How long a loop may go without polling, or without Kafka answering it, and still be healthy."""
ASK_KAFKA_EVERY_S = 5.0
"""While nothing arrives, a watched loop asks Kafka whether it answers this often (or more often)."""
ASK_KAFKA_TIMEOUT_S = 2.0
"""How long that ask waits for a broker: the loop's longest pause while the broker is away."""


@dataclass(frozen=True)
class LoopState:
    """What a serve loop last did (all times Unix seconds), as its `LoopWatch` holds it."""

    labels: Mapping[str, str]
    """Whose loop: instance, service (and database, for an endpoint)."""
    started_at: float
    stopped: str | None = None
    """Why the loop is not running any more (stopped, failed, closed); None while it runs."""
    polled_at: float | None = None
    """When its last poll returned."""
    kafka_at: float | None = None
    """When Kafka last answered it: a record arrived, or a metadata request returned."""
    kafka_error: str | None = None
    """What the last failed request to Kafka said, when it failed after `kafka_at`."""
    did: str | None = None
    """The last thing the loop did, in words (an answer, a batch taken)."""
    did_at: float | None = None


def judge_loop(state: LoopState, now: float, bound_s: float = HEALTH_BOUND_S) -> Health:
    """200 while the loop polls and Kafka answers it, each within `bound_s`; 503 with the reason otherwise."""
    body: dict[str, object] = {**state.labels, "bound_s": bound_s, "started_at": round(state.started_at, 3)}
    if state.polled_at is not None:
        body["last_poll"] = _when(state.polled_at, now)
    if state.kafka_at is not None or state.kafka_error is not None:
        kafka: dict[str, object] = {} if state.kafka_at is None else _when(state.kafka_at, now)
        if state.kafka_error is not None:
            kafka["error"] = state.kafka_error
        body["kafka"] = kafka
    if state.did is not None and state.did_at is not None:
        body["last_did"] = {"what": state.did, **_when(state.did_at, now)}

    def unhealthy(reason: str) -> Health:
        return Health(False, {**body, "status": "unavailable", "reason": reason})

    if state.stopped is not None:
        return unhealthy(state.stopped)
    if state.polled_at is None:
        return unhealthy(
            f"starting: the loop has not polled yet ({now - state.started_at:.0f} s since start)"
        )
    if now - state.polled_at > bound_s:
        return unhealthy(
            f"the loop has not polled for {now - state.polled_at:.0f} s (bound {bound_s:g} s): it is stuck, "
            "or the program stopped calling it"
        )
    said = f"; the last request said: {state.kafka_error}" if state.kafka_error else ""
    if state.kafka_at is None:
        return unhealthy(
            f"Kafka has not answered the loop since it started ({now - state.started_at:.0f} s ago){said}"
        )
    if now - state.kafka_at > bound_s:
        return unhealthy(
            f"Kafka has not answered the loop for {now - state.kafka_at:.0f} s (bound {bound_s:g} s){said}"
        )
    return Health(True, {**body, "status": "ok"})


def _when(at: float, now: float) -> dict[str, object]:
    return {"at": round(at, 3), "age_s": round(now - at, 3)}


@dataclass
class _Held:
    state: LoopState
    asked_at: float | None = None


class LoopWatch:
    """What a serve loop last did: set from the loop's thread, read from the metrics server's.

    `bound_s` is the health's bound (`judge_loop`). Each call takes the time from `clock` (the
    loop's edge; `judge_loop` itself reads no clock).
    """

    def __init__(
        self,
        labels: Mapping[str, str],
        bound_s: float = HEALTH_BOUND_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if bound_s <= 0:
            raise ConfigError(f"health_bound_s: expected a bound > 0 seconds, got {bound_s}")
        self.bound_s = bound_s
        self._clock = clock
        self._lock = threading.Lock()
        self._held = _Held(LoopState(dict(labels), clock()))

    def _set(self, **changes: object) -> None:
        with self._lock:
            self._held.state = replace(self._held.state, **changes)  # type: ignore[arg-type]

    def polled(self) -> None:
        """The loop's poll returned (whatever it brought)."""
        self._set(polled_at=self._clock())

    def kafka_answered(self) -> None:
        """Kafka answered the loop: a record arrived, or a request returned."""
        self._set(kafka_at=self._clock(), kafka_error=None)

    def kafka_failed(self, error: str) -> None:
        """A request to Kafka failed: `error` is what the client said."""
        self._set(kafka_error=error)

    def did(self, what: str) -> None:
        """The loop did `what` (one line for people) just now."""
        self._set(did=what, did_at=self._clock())

    def stop(self, reason: str) -> None:
        """The loop ended (`reason` says how); a first reason is kept, a later one does not replace it."""
        with self._lock:
            if self._held.state.stopped is None:
                self._held.state = replace(self._held.state, stopped=reason)

    def restart(self) -> None:
        """The loop runs (again): its health is judged from its polls once more."""
        self._set(stopped=None)

    def kafka_due(self) -> bool:
        """Whether to ask Kafka now: it has not answered, nor been asked, for `ASK_KAFKA_EVERY_S`.

        Or for a third of the bound, when that is shorter: a loop asks often enough to stay healthy.
        True marks it asked: the next one falls due that much later.
        """
        every_s = min(ASK_KAFKA_EVERY_S, self.bound_s / 3)
        now = self._clock()
        with self._lock:
            times = [t for t in (self._held.asked_at, self._held.state.kafka_at) if t is not None]
            if times and now - max(times) < every_s:
                return False
            self._held.asked_at = now
            return True

    def state(self) -> LoopState:
        """What the loop last did, as one consistent picture."""
        with self._lock:
            return self._held.state

    def health(self) -> Health:
        """`judge_loop` of the state now, with the watch's bound."""
        return judge_loop(self.state(), self._clock(), self.bound_s)


def ask_kafka(watch: LoopWatch, consumer: Consumer, topic: str) -> None:
    """Ask Kafka for `topic`'s metadata through the loop's own consumer; tell `watch` whether it answered.

    Called from the loop's thread when `watch.kafka_due()`: it waits at most `ASK_KAFKA_TIMEOUT_S`.
    """
    try:
        consumer.list_topics(topic, timeout=ASK_KAFKA_TIMEOUT_S)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        watch.kafka_failed(error.str() if isinstance(error, KafkaError) else str(exc))
    else:
        watch.kafka_answered()
