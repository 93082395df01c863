"""streaming.spark.session.cast_to: the same cast as to the type object, in fewer py4j round trips."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from py4j import protocol as proto
from py4j.clientserver import ClientServerConnection
from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    AtomicType,
    BinaryType,
    BooleanType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from streaming.spark.output import HEADER_DDL, HEADER_TYPE
from streaming.spark.session import cast_to

TYPES = [
    StringType(),
    LongType(),
    IntegerType(),
    BooleanType(),
    BinaryType(),
    TimestampType(),
    HEADER_TYPE,
    StructType([StructField("a b", StringType()), StructField("n", LongType(), False)]),
]


@pytest.mark.parametrize("dtype", TYPES, ids=lambda t: t.simpleString())
def test_a_cast_by_name_gives_the_type_a_cast_to_the_object_gives(
    spark: SparkSession, dtype: DataType
) -> None:
    frame = spark.range(1).select(cast_to(F.lit(None), dtype).alias("x"), F.lit(None).cast(dtype).alias("y"))
    assert frame.schema["x"].dataType == frame.schema["y"].dataType
    if isinstance(dtype, AtomicType):
        assert frame.schema["x"].dataType == dtype


def test_the_headers_type_by_name_is_the_headers_type(spark: SparkSession) -> None:
    frame = spark.range(1).select(F.array().cast(HEADER_DDL).alias("h"))
    assert frame.schema["h"].dataType == HEADER_TYPE


DELETE = proto.MEMORY_COMMAND_NAME + proto.MEMORY_DEL_SUBCOMMAND_NAME
"""How py4j's command telling the JVM that Python dropped an object's handle begins."""


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Callable[[], Column]], int]]:
    """Counts the py4j commands the Python side sends while a function builds a column.

    py4j's deletions of dropped handles are not counted: its finalizer thread sends them whenever
    Python frees handles, also ones an earlier test dropped (92 fell within one count in CI).
    """
    sent = [0]
    send = ClientServerConnection.send_command

    def counting(self: ClientServerConnection, command: str) -> str:
        if not command.startswith(DELETE):
            sent[0] += 1
        return send(self, command)

    monkeypatch.setattr(ClientServerConnection, "send_command", counting)

    def count(build: Callable[[], Column]) -> int:
        build()  # py4j's first lookups of a class or method are not what is measured
        sent[0] = 0
        build()
        return sent[0]

    yield count


def test_a_cast_of_an_atomic_type_by_name_takes_one_round_trip(
    spark: SparkSession, round_trips: Callable[[Callable[[], Column]], int]
) -> None:
    column = F.col("x")
    by_name = round_trips(lambda: cast_to(column, LongType()))
    by_object = round_trips(lambda: column.cast(LongType()))
    assert by_name == 1
    assert by_object > by_name
