"""A data-dependent routing service's classifier: a Spark SQL expression over a message, in the JVM.

The expression reads the columns of `CLASSIFIER_SCHEMA` (the message's `body` as bytes, its
`message_type`, `from_service`, `conversation_id` and `sequence_number`) and gives the target
service's name, as a string, or a struct with `service` and `broker_instance` (both strings; a
broker instance names one database, R3). For example, for XML and JSON bodies:

    xpath_string(cast(body as string), '/message/toServiceName')
    get_json_object(cast(body as string), '$.region')
    named_struct('service', concat('Sales', xpath_string(cast(body as string), '//region')),
                 'broker_instance', xpath_string(cast(body as string), '//database'))

`Classifier` checks the expression against the columns once (a typo is refused when the service
starts, naming the expression), then classifies a batch of first messages in one Spark job. A
message whose classification fails (the expression raises on its body) or gives nothing (null or
an empty name) gets a `streaming.ddr.answers.Classification` with the reason instead: it never stops the
others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.errors import AnalysisException, ParseException
from pyspark.sql import Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from streaming.ddr.answers import Classification
from streaming.endpoint.endpoint import Received
from streaming.errors import ConfigError, short_error
from streaming.rules.model import canonical_guid
from streaming.spark.decider import local_frame
from streaming.tables.validate import ADDRESS_MAX as SERVICE_NAME_MAX

CLASSIFIER_SCHEMA = StructType(
    [
        StructField("conversation_id", StringType(), False),
        StructField("sequence_number", LongType(), False),
        StructField("message_type", StringType(), False),
        StructField("from_service", StringType(), False),
        StructField("body", BinaryType(), False),
    ]
)
"""The columns a classifier reads."""

TARGET = "target"


@dataclass(frozen=True)
class ClassifierInput:
    """One message to classify: the values of `CLASSIFIER_SCHEMA`."""

    conversation_id: str
    sequence_number: int
    message_type: str
    from_service: str
    body: bytes

    def row(self) -> tuple[object, ...]:
        """The values in the order of `CLASSIFIER_SCHEMA`."""
        return (self.conversation_id, self.sequence_number, self.message_type, self.from_service, self.body)


class Classifier:
    """A classifier expression, checked against the message's columns (see the module docstring)."""

    def __init__(self, spark: SparkSession, expression: str, where: str = "the classifier") -> None:
        self.spark = spark
        self.expression = expression
        try:
            self.column = F.expr(expression).alias(TARGET)
            target = local_frame(spark, [], CLASSIFIER_SCHEMA).select(self.column).schema[TARGET].dataType
        except (ParseException, AnalysisException) as exc:
            raise ConfigError(
                f"{where}: {expression!r} is not a Spark SQL expression over the message's columns "
                f"({', '.join(CLASSIFIER_SCHEMA.fieldNames())}): {short_error(exc)}"
            ) from exc
        names = target.fieldNames() if isinstance(target, StructType) else []
        strings = isinstance(target, StructType) and all(
            isinstance(f.dataType, StringType) for f in target.fields
        )
        if not isinstance(target, StringType) and not (
            strings and "service" in names and set(names) <= {"service", "broker_instance"}
        ):
            raise ConfigError(
                f"{where}: {expression!r} gives {target.simpleString()}; a classifier gives the target "
                "service's name (a string), or a struct of strings service and broker_instance"
            )
        self.gives_struct = isinstance(target, StructType)

    def classify(self, messages: Sequence[ClassifierInput]) -> list[Classification]:
        """Classify `messages` in one Spark job, or each alone when that fails.

        So one message whose classification raises gets its reason, and the others their targets.
        """
        if not messages:
            return []
        try:
            return [self._read(row) for row in self._run(messages)]
        except Exception as exc:  # a message's failure: classify them one by one
            if len(messages) == 1:
                return [_failed(exc)]
            return [self._one(m) for m in messages]

    def classify_received(self, received: Sequence[Received]) -> list[Classification]:
        """`classify` the messages a routing service received (`streaming.ddr.service.RoutingService`)."""
        return self.classify(
            [
                ClassifierInput(m.dialog.conversation_id, m.sequence, m.message_type, m.far_service, m.body)
                for m in received
            ]
        )

    def _one(self, message: ClassifierInput) -> Classification:
        try:
            return self._read(self._run([message])[0])
        except Exception as exc:  # the expression raised on this message
            return _failed(exc)

    def _run(self, messages: Sequence[ClassifierInput]) -> list[Row]:
        frame = local_frame(self.spark, [m.row() for m in messages], CLASSIFIER_SCHEMA)
        return frame.select(self.column).collect()

    def _read(self, row: Row) -> Classification:
        value = row[TARGET]
        if self.gives_struct:
            service, broker = (
                (None, None) if value is None else (value["service"], value.asDict().get("broker_instance"))
            )
        else:
            service, broker = value, None
        if not service:
            return Classification(error=f"the classifier gave no service for the message ({self.expression})")
        if len(service) > SERVICE_NAME_MAX:
            return Classification(
                error=f"the classifier gave a service name longer than {SERVICE_NAME_MAX} characters"
            )
        if broker:
            try:
                return Classification(service, canonical_guid(broker))
            except ValueError:
                return Classification(
                    error=f"the classifier gave a broker instance that is not a GUID: {broker!r}"
                )
        return Classification(service)


def _failed(error: BaseException) -> Classification:
    """The classification of a message the expression raised on."""
    return Classification(error=f"the classifier failed: {short_error(error)}")
