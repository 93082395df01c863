"""A data-dependent routing service's classifier: a Spark SQL expression over each message (JVM)."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from streaming.ddr.answers import Classification
from streaming.errors import ConfigError
from streaming.spark.classifier import Classifier, ClassifierInput

pytestmark = pytest.mark.integration

XML = "xpath_string(cast(body as string), '/message/toServiceName')"
JSON = "concat('Sales', get_json_object(cast(body as string), '$.region'))"
FAR1 = "5fb8d92b-ed69-4c80-afbb-2aa6a7d3cb2d"


def message(body: bytes, conversation: str = "c1") -> ClassifierInput:
    return ClassifierInput(conversation, 0, "DEFAULT", "InitiatorService", body)


def test_an_xml_classifier_names_each_message_s_service(spark: SparkSession) -> None:
    classifier = Classifier(spark, XML)
    got = classifier.classify(
        [
            message(b"<message><toServiceName>SalesEast</toServiceName></message>"),
            message(b"<message><toServiceName>SalesWest</toServiceName></message>"),
        ]
    )
    assert got == [Classification("SalesEast"), Classification("SalesWest")]


def test_a_json_classifier_and_a_struct_with_a_broker_instance(spark: SparkSession) -> None:
    assert Classifier(spark, JSON).classify([message(b'{"region": "North"}')]) == [
        Classification("SalesNorth")
    ]
    struct = Classifier(
        spark,
        "named_struct('service', get_json_object(cast(body as string), '$.to'), "
        "'broker_instance', get_json_object(cast(body as string), '$.db'))",
    )
    body = ('{"to": "Sales", "db": "' + FAR1.upper() + '"}').encode()
    assert struct.classify([message(body)]) == [Classification("Sales", FAR1)]


def test_a_message_the_classifier_fails_on_or_finds_nothing_in_gets_the_reason_alone(
    spark: SparkSession,
) -> None:
    classifier = Classifier(spark, XML)
    got = classifier.classify(
        [
            message(b"<message><toServiceName>SalesEast</toServiceName></message>"),
            message(b"not xml at all <"),
            message(b"<message><other/></message>"),
        ]
    )
    assert got[0] == Classification("SalesEast")
    assert got[1].service is None and got[1].error is not None and "classifier failed" in got[1].error
    assert got[2].service is None and got[2].error is not None and "gave no service" in got[2].error
    bad_guid = Classifier(spark, "named_struct('service', 'S', 'broker_instance', 'nope')")
    (only,) = bad_guid.classify([message(b"")])
    assert only.error is not None and "not a GUID" in only.error


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ("xpath_string(cast(body as string), ", "is not a Spark SQL expression"),
        ("upper(to_service)", "is not a Spark SQL expression"),
        ("length(body)", "gives int"),
        ("named_struct('target', 'S')", "gives struct"),
    ],
)
def test_a_classifier_that_cannot_name_a_service_is_refused_at_once(
    spark: SparkSession, expression: str, says: str
) -> None:
    with pytest.raises(ConfigError, match=says):
        Classifier(spark, expression, "routes/ddr.yaml")
