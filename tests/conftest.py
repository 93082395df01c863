"""Shared fixtures. Tiers (see pyproject's markers): tests/unit need no services; tests/integration
share ONE broker and one Spark session per pytest process (`make test` runs two, with
pytest-xdist); tests/e2e run the CLI.

Where the integration broker comes from, by environment:

    (default)                               an EmbeddedKafka in a temporary dir, free port, stopped at exit
    ROUTER_TEST_KAFKA=docker                testcontainers' KafkaContainer (image: ROUTER_TEST_KAFKA_IMAGE)
    ROUTER_TEST_KAFKA_BOOTSTRAP=host:port   an existing cluster, left as it is

Every test takes its own topics and consumer groups from `unique_topic` / `unique_group`, so tests
never see each other's records on the shared broker.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # the unit tier imports no Spark
    from pyspark.sql import SparkSession

DEFAULT_DOCKER_IMAGE = "confluentinc/cp-kafka:7.6.0"  # what testcontainers' KafkaContainer drives

TEST_COMPILER = "-XX:TieredStopAtLevel=1"
"""The C1 compiler only. A test's JVM lives for seconds to minutes, and C2 spends much of that CPU
compiling code the test then hardly runs.

- The Spark JVMs: measured alone on 2 cores, each test once with and once without (2026-11-29): the
  five-kill test 196 s against 250 s, the SIGINT and SIGTERM test 85 s against 111 s, the streaming
  job's, Spark engine's and memory's 188 integration tests on two workers 342 s against 365 s.
- The brokers: measured on 2026-11-30, a broker's start took 4.6-5.2 s of CPU against 7.1-8.3 s;
  200,000 records written to 20 topics and read back, 3.5-4.6 s against 6.9 s; the streaming job's
  22 tests on two workers took 216 s against 238 s, their two brokers 58 s of CPU against 116 s."""

SERIAL_COLLECTOR = "-XX:+UseSerialGC"
"""The serial collector: one thread, no coordination between several. The suite's JVMs are many
(two pytest workers' drivers, brokers, routers run as processes, a cluster's daemons) on two cores,
each with a small heap, so a collector's parallel threads only contend with the other JVMs. Measured
on 2026-11-30, the streaming job's 22 tests and the broker-outage test on two workers, in
alternating runs: 403 and 417 s of the machine's CPU with it against 431 and 432 s without; the
same runs took 278 s each against 285 and 282 s (with C1's threshold at Java's default too, not
kept: 408 s of CPU, 275 s)."""

TEST_SPARK_JVM_OPTIONS = f"{TEST_COMPILER} -XX:-UseParallelGC {SERIAL_COLLECTOR}"
"""The Spark JVMs' flags in the suite (`ROUTER_JVM_OPTIONS`, `streaming.jvm_flags.SPARK_JVM_OPTIONS_ENV`):
drivers, routers run as processes, executors and a standalone cluster's daemons. They come after
the router's own flags, so the serial collector takes the parallel one's place."""

TEST_KAFKA_JVM_OPTIONS = f"{TEST_COMPILER} -XX:-UseG1GC {SERIAL_COLLECTOR}"
"""The brokers' flags in the suite (`ROUTER_KAFKA_JVM_OPTIONS`, `streaming.jvm_flags.KAFKA_JVM_OPTIONS_ENV`),
after the broker's own (`streaming.devtools.embedded_kafka.JVM_OPTIONS`, G1's among them)."""

# What the router does is the same under either compiler and collector; `make bench` and
# `router run` keep their own. `ROUTER_JVM_OPTIONS= ROUTER_KAFKA_JVM_OPTIONS= make test` runs the
# suite with them.


def pytest_configure(config: pytest.Config) -> None:
    """Every JVM the tests start (Spark's, routers run as processes and brokers included) gets the
    suite's flags (`TEST_SPARK_JVM_OPTIONS`, `TEST_KAFKA_JVM_OPTIONS`), unless the environment
    gives its own."""
    from streaming.jvm_flags import KAFKA_JVM_OPTIONS_ENV, SPARK_JVM_OPTIONS_ENV

    os.environ.setdefault(SPARK_JVM_OPTIONS_ENV, TEST_SPARK_JVM_OPTIONS)
    os.environ.setdefault(KAFKA_JVM_OPTIONS_ENV, TEST_KAFKA_JVM_OPTIONS)


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """The bootstrap address of the session's one Kafka broker (see the module docstring)."""
    existing = os.environ.get("ROUTER_TEST_KAFKA_BOOTSTRAP")
    if existing:
        yield existing
        return
    mode = os.environ.get("ROUTER_TEST_KAFKA", "embedded")
    if mode == "docker":
        from testcontainers.kafka import KafkaContainer

        image = os.environ.get("ROUTER_TEST_KAFKA_IMAGE", DEFAULT_DOCKER_IMAGE)
        with KafkaContainer(image).with_kraft() as container:
            yield container.get_bootstrap_server()
        return
    if mode != "embedded":
        raise pytest.UsageError(f"ROUTER_TEST_KAFKA must be 'embedded' or 'docker', got {mode!r}")

    from streaming.devtools.embedded_kafka import EmbeddedKafka

    # Its own temporary dir rather than tmp_path_factory's: pytest prunes old base temp dirs when
    # another pytest run starts, which must not pull the data dir from under a running broker.
    with (
        tempfile.TemporaryDirectory(prefix="router-test-kafka-") as state_dir,
        EmbeddedKafka(state_dir) as broker,
    ):
        yield broker.bootstrap


@pytest.fixture
def unique_topic() -> Callable[[str], str]:
    """A factory of topic names no other test uses: `unique_topic("orders")` -> `test.orders.<uuid>`."""

    def make(label: str = "topic") -> str:
        return f"test.{label}.{uuid.uuid4().hex[:12]}"

    return make


@pytest.fixture
def unique_group() -> Callable[[str], str]:
    """A factory of consumer group ids no other test uses."""

    def make(label: str = "group") -> str:
        return f"test-{label}-{uuid.uuid4().hex[:12]}"

    return make


# --- Spark ------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def spark(kafka_bootstrap: str) -> Iterator[SparkSession]:
    """The session's one SparkSession, built by the same function as the job (with the Kafka jars).

    It depends on the broker so that Spark stops before the broker does.
    """
    from streaming.spark.session import build_session

    session = build_session("router-tests", shuffle_partitions=1)
    yield session
    session.stop()


# --- order ------------------------------------------------------------------------------------------

COST_ORDER = ("fault", "e2e", "integration")
"""Markers by the minutes their tests take, longest first."""

LONGEST = (
    "test_five_kills_at_random_moments_lose_nothing",
    "test_a_to_b_through_a_forwarder_killed_twice_delivers_each_message_once_in_order",
)
"""The suite's two longest tests (177 and 142 s in `bash .ci/run` on 2026-12-07, a slow day, when
the whole suite took 1,510 s), which start it."""

UNIT_DIR = Path(__file__).parent / "unit"

UNIT_TIMEOUT_S = 60
"""A unit test's bound in seconds: the slowest take 5 s (a Kafka client that finds no broker)."""

FAULT_TIMEOUT_S = 900
"""A fault test's bound: the longest, `LONGEST`'s first, took 177 s on 2026-12-07 (196 s alone on
2026-11-29, `TEST_COMPILER`). Every other test has pyproject's `timeout` (300 s): outside the fault
tier, the integration and e2e tests took at most 59 s that day."""


def bound(item: pytest.Item) -> None:
    """Give `item` its tier's time bound (pytest-timeout's `timeout` marker) unless it has its own.

    A fault test gets `FAULT_TIMEOUT_S`, a test of tests/unit `UNIT_TIMEOUT_S`; the others keep
    pyproject's `timeout`. A test that runs past its bound fails with every thread's stack.
    """
    if item.get_closest_marker("timeout") is not None:
        return
    if item.get_closest_marker("fault") is not None:
        item.add_marker(pytest.mark.timeout(FAULT_TIMEOUT_S))
    elif UNIT_DIR in item.path.parents:
        item.add_marker(pytest.mark.timeout(UNIT_TIMEOUT_S))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the session so that it fails fast and its two workers finish together.

    `make test` runs one pytest-xdist session whose workers take tests in this order, two at a time
    and then the next one as each finishes (`--maxschedchunk 1`). The first worker starts on the two
    longest tests (`LONGEST`) while the second runs the short ones (integration tier, then unmarked),
    so a broken integration test fails within minutes rather than after the long tiers; then the
    other long tests, fault tier before e2e (`COST_ORDER`). Within a tier the files' order is kept.
    Each test also gets its tier's time bound (`bound`), so that a hang fails within minutes too.
    """
    for item in items:
        bound(item)
    short = COST_ORDER.index("integration")

    def place(item: pytest.Item) -> tuple[int, int]:
        if item.name in LONGEST:
            return 0, LONGEST.index(item.name)
        tier = next(
            (n for n, marker in enumerate(COST_ORDER) if item.get_closest_marker(marker)), len(COST_ORDER)
        )
        return (1, tier) if tier >= short else (2, tier)

    items.sort(key=place)
