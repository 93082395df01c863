"""Thin helpers over confluent-kafka's AdminClient: topics and offsets.

Every call takes the connection (`streaming.kafka.connection`: a `KafkaConnection`, or a bare
bootstrap address for a PLAINTEXT broker) and builds its own short-lived client, so nothing is
kept open between calls (a client must stay referenced until its futures resolve: a dropped
AdminClient leaves them pending for ever). A broker that does not answer raises
`KafkaUnavailable`; a request the broker refuses raises `RouterError` naming the topic and the
broker's reason. librdkafka's own log lines go to the `streaming.kafka.librdkafka` logger, not
stderr.

Topics are created replicated as the connection's settings ask (`replication_factor`,
`min_insync_replicas`: streaming/kafka/durability.py), by default on as many brokers as the
cluster has, up to 3. An existing topic is never changed: one with fewer replicas than asked is
reported in one warning per topic and process, with the fix.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import Future

from confluent_kafka import IsolationLevel, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ClusterMetadata, ConfigResource, NewTopic, OffsetSpec

from streaming.errors import KafkaUnavailable, RouterError, TopicMissing
from streaming.kafka.client_log import librdkafka_log
from streaming.kafka.connection import ClientValue, Kafka, bootstrap_of, client_config, connection_of
from streaming.kafka.durability import Replication

_LIBRDKAFKA_LOG = librdkafka_log()
log = logging.getLogger("streaming.kafka.admin")


EAGER_ADMIN: dict[str, ClientValue] = {"enable.sparse.connections": False}
"""An admin client connects to the brokers as it is made (`admin_client`). With librdkafka's sparse
connections (its default) a new client's first answer came 55-65 ms after it was made, against
5-11 ms with them off (one broker on loopback, 2026-11-30); a command or a test makes many clients
for a question or a few each (six tests of the streaming job made 257)."""


def admin_client(kafka: Kafka, *, lazy: bool = False) -> AdminClient:
    """Return an AdminClient connected by `kafka` whose log lines go to Python logging.

    It connects to the brokers as it is made (`EAGER_ADMIN`). A `lazy` one connects to a broker
    only when a question needs one (librdkafka's sparse connections): for a client kept for the
    life of a process, or one that asks over and over while a broker may be away, so that it does
    not knock at every broker.
    """
    config = client_config(kafka) if lazy else client_config(kafka, **EAGER_ADMIN)
    return AdminClient(config, logger=_LIBRDKAFKA_LOG)


def brokers_listed(client: AdminClient, topic: str, timeout: float) -> ClusterMetadata | None:
    """`topic`'s metadata (it lists the live brokers) as a kept client gets it; None: no answer.

    None when no broker answered within `timeout`. The client's log lines are handed over here, to
    the `streaming.kafka.librdkafka` logger (an admin client gives them only when it is polled),
    before the caller hears the answer: a refusal queued during the ask then belongs to the outage
    the answer may end (`OutageLog.answered`), instead of starting a new one once it is over. The
    job also polls its kept client between asks (`RouterJob._serve_client_lines`); unpolled, its
    lines piled up unread (26 a second while its one broker was away), and an outage showed only
    when some other client happened to try a broker meanwhile.
    """
    try:
        return client.list_topics(topic, timeout=timeout)
    except KafkaException:
        return None
    finally:
        client.poll(0)


def cluster_metadata(
    kafka: Kafka, timeout: float = 10.0, client: AdminClient | None = None
) -> ClusterMetadata:
    """Return the cluster's metadata (brokers and topics), or raise KafkaUnavailable.

    `client`: an `admin_client(kafka)` the caller keeps for its next questions (`end_offsets`).
    """
    return _listed(client if client is not None else admin_client(kafka), kafka, timeout)


def _listed(client: AdminClient, kafka: Kafka, timeout: float) -> ClusterMetadata:
    """The cluster's metadata, asked by `client`, or raise KafkaUnavailable."""
    try:
        return client.list_topics(timeout=timeout)
    except KafkaException as exc:
        connection = connection_of(kafka)
        how = (
            "without security settings (a secured cluster needs the `kafka` section of the settings file, "
            "--config)"
            if connection.security_protocol == "PLAINTEXT"
            else f"with {connection.describe()} (check the `kafka` section of the settings file)"
        )
        raise KafkaUnavailable(
            f"expected a Kafka broker answering at {connection.bootstrap} within {timeout:g} s, "
            f"connecting {how}; got: {exc}"
        ) from exc


REACH_TIMEOUT_S = 5.0
"""How long a command waits for the first answer of the cluster before it says none answers."""


def require_broker(kafka: Kafka, timeout: float = REACH_TIMEOUT_S) -> ClusterMetadata:
    """The cluster's metadata, or KafkaUnavailable within `timeout` saying where none answered and the fix.

    A command asks this first, so that a broker that is not there is reported in seconds, with the
    address and what to do, rather than by a client's own error after its longer timeouts.
    """
    try:
        return _listed(admin_client(kafka), kafka, timeout)
    except KafkaUnavailable as exc:
        connection = connection_of(kafka)
        raise KafkaUnavailable(
            f"no Kafka broker answers at {connection.bootstrap} (waited {timeout:g} s): start the embedded "
            "one with `router kafka start` (127.0.0.1:19092), or name yours with `bootstrap:` in the "
            "settings file (--config), --bootstrap, or $ROUTER_BOOTSTRAP"
            + (
                ""
                if connection.security_protocol == "PLAINTEXT"
                else f"; connected with {connection.describe()}"
            )
        ) from exc


def broker_count(kafka: Kafka, timeout: float = 5.0) -> int:
    """Return how many brokers the cluster at `kafka` reports (KafkaUnavailable if none answers)."""
    return len(cluster_metadata(kafka, timeout).brokers)


def replication_of(
    kafka: Kafka, metadata: ClusterMetadata | None = None, timeout: float = 10.0
) -> Replication:
    """How new topics are replicated on the cluster at `kafka`, as its connection's settings ask.

    The default factor is the number of brokers `metadata` (else the cluster, asked now) lists, up
    to 3. A job asks once, when it starts, and creates every topic of its run with the answer.
    """
    if metadata is None:
        metadata = cluster_metadata(kafka, timeout)
    return connection_of(kafka).replication.for_brokers(len(metadata.brokers))


_reported: set[tuple[str, str]] = set()
"""The (bootstrap, topic) pairs whose missing replicas were reported: once per process."""
_reported_lock = threading.Lock()


def _report_missing_replicas(
    kafka: Kafka, metadata: ClusterMetadata, names: Iterable[str], replication: Replication
) -> None:
    """Warn, once per topic, about the existing topics among `names` with fewer replicas than asked."""
    bootstrap = bootstrap_of(kafka)
    for name in names:
        topic = metadata.topics.get(name)
        if topic is None or topic.error is not None or not topic.partitions:
            continue
        have = min(len(p.replicas) for p in topic.partitions.values())
        if have >= replication.factor:
            continue
        with _reported_lock:
            if (bootstrap, name) in _reported:
                continue
            _reported.add((bootstrap, name))
        log.warning(
            "topic %s at %s has %d replica(s) per partition where %d are asked (replication_factor), and "
            "is left as it is: to add replicas, reassign its partitions with Kafka's tool "
            "(kafka-reassign-partitions.sh --bootstrap-server %s --reassignment-json-file FILE --execute, "
            "FILE naming %d brokers for each partition), then kafka-configs.sh --bootstrap-server %s "
            "--alter --entity-type topics --entity-name %s --add-config min.insync.replicas=%d",
            name,
            bootstrap,
            have,
            replication.factor,
            bootstrap,
            replication.factor,
            bootstrap,
            name,
            replication.min_insync,
        )


def _missing_topics(
    kafka: Kafka, wanted: list[str], replication: Replication | None, timeout: float
) -> tuple[list[str], Replication]:
    """The topics of `wanted` the cluster lacks, and the replication to make them with.

    `replication`, else the cluster's default; the topics it has, with fewer replicas than that, are
    reported once.
    """
    metadata = cluster_metadata(kafka, timeout)
    replication = replication or replication_of(kafka, metadata)
    missing = [name for name in wanted if name not in metadata.topics]
    _report_missing_replicas(kafka, metadata, [n for n in wanted if n not in missing], replication)
    return missing, replication


TOO_FEW_BROKERS = (
    "the cluster has fewer brokers up than the replicas asked: start the brokers that are away, or set "
    "replication_factor to at most the number of brokers the cluster has"
)
"""What a topic creation refused for its replication factor says to do."""


def topic_names(kafka: Kafka, timeout: float = 10.0) -> set[str]:
    """Return the names of the cluster's topics, internal ones (`__consumer_offsets`) included."""
    return set(cluster_metadata(kafka, timeout).topics)


def _kafka_error(exc: KafkaException) -> KafkaError | None:
    """The KafkaError a confluent-kafka client raised `exc` with, or None when it holds none."""
    error = exc.args[0] if exc.args else None
    return error if isinstance(error, KafkaError) else None


def _result(future: Future[None], what: str, tolerated: int) -> bool:
    """Wait for one admin future; return False when it failed with the tolerated error code.

    Too few brokers up for a new topic's replicas is KafkaUnavailable: a broker away is not a refusal.
    """
    try:
        future.result()
    except KafkaException as exc:
        error = _kafka_error(exc)
        if error is not None and error.code() == tolerated:
            return False
        if error is not None and error.code() == KafkaError.INVALID_REPLICATION_FACTOR:
            raise KafkaUnavailable(f"{what}: {error.str()}; {TOO_FEW_BROKERS}") from exc
        if error is not None and error.code() in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT):
            raise KafkaUnavailable(f"{what}: the broker did not answer: {error.str()}") from exc
        raise RouterError(f"{what}: the broker refused: {exc}") from exc
    return True


def ensure_topics(
    kafka: Kafka,
    names: Iterable[str],
    partitions: int = 1,
    compacted: bool = False,
    *,
    config: Mapping[str, str] | None = None,
    replication: Replication | None = None,
    timeout: float = 30.0,
) -> list[str]:
    """Create the topics that do not exist yet; return the names that were created.

    Idempotent: an existing topic is left as it is, except that asking for `compacted` topics when
    one exists without `cleanup.policy=compact` raises RouterError (a route table must not be
    deleted by retention); one with fewer replicas than `replication` is reported once. Returns
    once every topic is in the metadata with a leader for each partition. `config` adds topic
    settings (`segment.ms`, ...). `replication` (default: `replication_of` the cluster now) gives
    the new topics' replicas and `min.insync.replicas`; a cluster with too few brokers up for them
    raises KafkaUnavailable.
    """
    wanted = list(dict.fromkeys(names))
    if partitions < 1:
        raise RouterError(f"expected at least 1 partition per topic, got {partitions}")
    if not wanted:
        return []
    client = admin_client(kafka)
    missing, replication = _missing_topics(kafka, wanted, replication, timeout)
    topic_config = {**replication.topic_config, **(config or {})}
    if compacted:
        topic_config["cleanup.policy"] = "compact"
    created: list[str] = []
    if missing:
        requests = [NewTopic(name, partitions, replication.factor, config=topic_config) for name in missing]
        futures = client.create_topics(requests, operation_timeout=timeout, request_timeout=timeout)
        for name, future in futures.items():
            what = f"creating topic {name!r} with {replication.factor} replicas at {bootstrap_of(kafka)}"
            if _result(future, what, KafkaError.TOPIC_ALREADY_EXISTS):
                created.append(name)
    if compacted:
        _check_compacted(client, [name for name in wanted if name not in created], kafka, timeout)
    _wait_for_leaders(kafka, wanted, timeout)
    return created


def create_destination_topics(
    kafka: Kafka, names: Iterable[str], *, replication: Replication | None = None, timeout: float = 30.0
) -> dict[str, str]:
    """Create the topics that do not exist yet; return those the broker refused, with its error.

    Unlike `ensure_topics`, a refusal (an invalid name, no authorization, a policy) is not raised:
    the router sets the messages for such a topic aside and goes on with the others. A broker that
    does not answer still raises KafkaUnavailable, and so does a cluster with too few brokers up
    for the replicas asked (`replication`, as in `ensure_topics`): a broker away is not a refusal.
    """
    wanted = list(dict.fromkeys(names))
    if not wanted:
        return {}
    client = admin_client(kafka)  # kept referenced: its futures resolve only while it lives
    missing, replication = _missing_topics(kafka, wanted, replication, timeout)
    refused: dict[str, str] = {}
    if missing:
        futures = client.create_topics(
            [NewTopic(name, 1, replication.factor, config=replication.topic_config) for name in missing],
            operation_timeout=timeout,
            request_timeout=timeout,
        )
        for name, future in futures.items():
            try:
                future.result()
            except KafkaException as exc:
                error = _kafka_error(exc)
                if error is not None and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                    continue
                unreachable = (KafkaError._TRANSPORT, KafkaError._TIMED_OUT)
                if error is not None and error.code() in unreachable:
                    raise KafkaUnavailable(
                        f"creating topic {name!r} at {bootstrap_of(kafka)}: {error.str()}"
                    ) from exc
                if error is not None and error.code() == KafkaError.INVALID_REPLICATION_FACTOR:
                    raise KafkaUnavailable(
                        f"creating topic {name!r} with {replication.factor} replicas at "
                        f"{bootstrap_of(kafka)}: {error.str()}; {TOO_FEW_BROKERS}"
                    ) from exc
                refused[name] = error.str() if error is not None else str(exc)
    _wait_for_leaders(kafka, [n for n in wanted if n not in refused], timeout)
    return refused


def _check_compacted(client: AdminClient, names: list[str], kafka: Kafka, timeout: float) -> None:
    if not names:
        return
    resources = [ConfigResource(ConfigResource.Type.TOPIC, name) for name in names]
    for resource, future in client.describe_configs(resources, request_timeout=timeout).items():
        try:
            entries = future.result()
        except KafkaException as exc:
            raise KafkaUnavailable(
                f"reading the settings of topic {resource.name!r} at {bootstrap_of(kafka)}: {exc}"
            ) from exc
        policy = entries["cleanup.policy"].value if "cleanup.policy" in entries else "delete"
        if "compact" not in (policy or "").split(","):
            raise RouterError(
                f"expected topic {resource.name!r} at {bootstrap_of(kafka)} to be compacted, "
                f"it exists with cleanup.policy={policy}: delete it or change its policy"
            )


def _wait_for_leaders(kafka: Kafka, names: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        topics = cluster_metadata(kafka, timeout).topics
        pending = [
            name
            for name in names
            if name not in topics
            or topics[name].error is not None
            or not topics[name].partitions
            or any(p.leader < 0 for p in topics[name].partitions.values())
        ]
        if not pending:
            return
        if time.monotonic() > deadline:
            raise KafkaUnavailable(
                f"expected topics {pending} at {bootstrap_of(kafka)} to have a leader within {timeout:g} s"
            )
        time.sleep(0.05)


def delete_topics(kafka: Kafka, names: Iterable[str], timeout: float = 30.0) -> list[str]:
    """Delete the topics that exist; return the names that were deleted (idempotent)."""
    wanted = list(dict.fromkeys(names))
    existing = set(cluster_metadata(kafka, timeout).topics)
    present = [name for name in wanted if name in existing]
    if not present:
        return []
    client = admin_client(kafka)  # kept referenced: its futures resolve only while it lives
    futures = client.delete_topics(present, operation_timeout=timeout, request_timeout=timeout)
    return [
        name
        for name, future in futures.items()
        if _result(
            future, f"deleting topic {name!r} at {bootstrap_of(kafka)}", KafkaError.UNKNOWN_TOPIC_OR_PART
        )
    ]


LEADER_RETRY_PAUSE_S = 0.1
"""The pause before asking again while a partition's leader is not ready (`leader_moving`)."""
_LEADER_MOVING = frozenset(
    {
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.OFFSET_NOT_AVAILABLE,
    }
)


def leader_moving(error: KafkaException | KafkaError | None) -> bool:
    """Whether the error says a partition's leader is not ready yet (a new topic, a leader change).

    The client raises these with `retriable()` false, so they are known by their codes.
    """
    if isinstance(error, KafkaException):
        error = _kafka_error(error)
    return error is not None and (error.retriable() or error.code() in _LEADER_MOVING)


def end_offsets(
    kafka: Kafka,
    topic: str,
    timeout: float = 10.0,
    client: AdminClient | None = None,
    *,
    committed: bool = False,
) -> dict[int, int]:
    """Return each partition's end offset (the offset the next record will get).

    `committed`: its last stable offset instead, the end a read_committed reader gets, short of the
    end offset while a transaction is open.

    While a partition's leader is not ready yet (a topic created a moment ago: the broker the
    metadata names may not lead it yet and answer NOT_LEADER_FOR_PARTITION) or away (its broker
    stopped: no leader at all), it is asked again until `timeout` (`leader_gone`). `client`, an
    `admin_client(kafka)` its caller keeps, asks in a few milliseconds where a new client takes
    about 60 (its start and its first connection).
    """
    # One client asks for the partitions, then for their end offsets: it knows each partition's
    # leader by then. A new client for the offsets looked the leaders up again, and that lookup
    # sometimes waited for librdkafka's one-second timer: 1.0 or 3.0 s instead of about 0.06 s, in
    # 7 of 45 bounded replays (whose end waited for it), and in none of 40 with one client.
    deadline = time.monotonic() + timeout
    while True:
        left = max(deadline - time.monotonic(), 0.1)
        # Kept referenced: its futures resolve only while it lives. (`client or ...` would not do: an
        # AdminClient with nothing queued is false.)
        asking = client if client is not None else admin_client(kafka)
        metadata = _listed(asking, kafka, left).topics.get(topic)
        moving: object = None
        if metadata is None or metadata.error is not None:
            if metadata is None or not leader_moving(metadata.error) or not time_for_another_ask(deadline):
                where = f"expected topic {topic!r} at {bootstrap_of(kafka)}"
                if metadata is None:
                    raise TopicMissing(f"{where}, it does not exist")
                raise RouterError(f"{where}, {metadata.error}")
            moving = metadata.error
        else:
            request = {TopicPartition(topic, p): OffsetSpec.latest() for p in metadata.partitions}
            isolation = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
            futures = asking.list_offsets(request, isolation_level=isolation, request_timeout=left)
            offsets: dict[int, int] = {}
            for tp, future in futures.items():
                try:
                    offsets[tp.partition] = future.result().offset
                except KafkaException as exc:
                    if not leader_gone(exc) or not time_for_another_ask(deadline):
                        where = f"{topic}[{tp.partition}] at {bootstrap_of(kafka)}"
                        raise KafkaUnavailable(f"reading the end offset of {where}: {exc}") from exc
                    moving = exc
            if moving is None:
                return dict(sorted(offsets.items()))
        log.debug("end offsets of %s: the leader is not ready yet (%s); asking again", topic, moving)
        time.sleep(LEADER_RETRY_PAUSE_S)


def leader_gone(exc: KafkaException) -> bool:
    """Whether an error of an offsets ask says a partition's leader is not there (yet).

    `leader_moving`, or the client's own errors for a partition the metadata listed but whose
    leader it does not know (its broker stopped, or it went away since the metadata named it):
    list_offsets' "Failed to query partition leaders: No leaders found" (_NOENT) and a consumer's
    get_watermark_offsets' "Unknown partition" (_UNKNOWN_PARTITION), both raised at once. Or the
    leader's UNKNOWN_TOPIC_OR_PART for a partition the metadata listed: on a cluster, the broker
    that leads a topic created a moment ago can answer for it before it has taken in the topic
    (seen on two brokers, asked for a topic the router had just created). A topic's own
    UNKNOWN_TOPIC_OR_PART in the metadata still says it does not exist (`leader_moving`).
    """
    error = _kafka_error(exc)
    return leader_moving(error) or (error is not None and error.code() in _NO_LEADER_KNOWN)


_NO_LEADER_KNOWN = frozenset(
    {KafkaError._NOENT, KafkaError._UNKNOWN_PARTITION, KafkaError.UNKNOWN_TOPIC_OR_PART}
)


def time_for_another_ask(deadline: float) -> bool:
    """Whether a pause of `LEADER_RETRY_PAUSE_S` still leaves time before `deadline` (monotonic)."""
    return time.monotonic() + LEADER_RETRY_PAUSE_S < deadline
