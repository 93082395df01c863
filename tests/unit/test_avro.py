"""The Avro wire contract: every schema round-trips, and bad bytes fail with MalformedRecord."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streaming.errors import ConfigError, MalformedRecord
from streaming.kafka import avro
from streaming.rules.model import REMOTE, Database, Instance, Route

UTC = timezone.utc
texts = st.text(max_size=40)
optional_texts = st.none() | texts
guids = st.uuids().map(str)
# timestamp-millis keeps milliseconds only; stay inside datetime's range.
instants = st.datetimes(
    min_value=datetime(1970, 1, 1), max_value=datetime(9999, 1, 1), timezones=st.just(UTC)
).map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000))
longs = st.integers(min_value=-(2**63), max_value=2**63 - 1)
ints = st.integers(min_value=-(2**31), max_value=2**31 - 1)

message_records = st.fixed_dictionaries(
    {
        "message_id": texts,
        "conversation_id": texts,
        "sequence_number": longs,
        "from_service": texts,
        "from_broker_instance": st.none() | guids,
        "to_service": texts,
        "to_broker_instance": st.none() | guids,
        "origin_database": optional_texts,
        "is_initiator": st.booleans(),
        "message_type": texts,
        "body": st.binary(max_size=200),
        "hops_remaining": ints,
        "time_to_live_ms": st.none() | longs,
        "expires_at": st.none() | instants,
        "enqueued_at": instants,
        "attempt": ints,
    }
)
route_records = st.fixed_dictionaries(
    {
        "scope": texts,
        "name": texts,
        "service": optional_texts,
        "broker_instance": st.none() | guids,
        "address": texts,
        "mirror_address": optional_texts,
        "expires_at": st.none() | instants,
    }
)
database_records = st.fixed_dictionaries(
    {
        "name": texts,
        "broker_instance": guids,
        "broker_enabled": st.booleans(),
        "services": st.lists(texts, max_size=4),
    }
)
catalog_records = st.fixed_dictionaries(
    {
        "name": texts,
        "address": texts,
        "forwarding": st.booleans(),
        "forward_size_mb": ints,
        "retry_s": st.floats(allow_nan=False),
        "databases": st.lists(database_records, max_size=4),
    }
)


@given(message_records)
def test_message_round_trip(record: dict) -> None:
    assert avro.decode_message(avro.encode_message(record)) == record


@given(route_records)
def test_route_round_trip(record: dict) -> None:
    assert avro.decode_route(avro.encode_route(record)) == record


@given(catalog_records)
def test_catalog_round_trip(record: dict) -> None:
    assert avro.decode_catalog(avro.encode_catalog(record)) == record


@given(route_records)
def test_route_model_round_trip(record: dict) -> None:
    route = avro.record_to_route(record)
    assert avro.record_to_route(avro.decode_route(avro.encode_route(avro.route_to_record(route)))) == route


@given(catalog_records)
def test_instance_model_round_trip(record: dict) -> None:
    instance = avro.record_to_instance(record)
    decoded = avro.decode_catalog(avro.encode_catalog(avro.catalog_to_record(instance)))
    assert avro.record_to_instance(decoded) == instance


def test_defaults_fill_omitted_optional_fields() -> None:
    record = avro.decode_route(
        avro.encode_route({"scope": "AW", "name": "AutoCreatedLocal", "address": "LOCAL"})
    )
    assert record == {
        "scope": "AW",
        "name": "AutoCreatedLocal",
        "service": None,
        "broker_instance": None,
        "address": "LOCAL",
        "mirror_address": None,
        "expires_at": None,
    }


def test_naive_datetimes_are_taken_as_utc() -> None:
    route = Route(scope="AW", name="r", address="LOCAL", expires_at=datetime(2026, 1, 1, 12, 0))
    decoded = avro.record_to_route(avro.decode_route(avro.encode_route(avro.route_to_record(route))))
    assert decoded.expires_at == datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def test_message_record_to_model_outbound_and_inbound() -> None:
    record = avro.new_message_record(
        message_id="m1",
        conversation_id="c1",
        to_service="OrderParts",
        to_broker_instance="5fb8d92b-ed69-4c80-afbb-2aa6a7d3cb2d",
        from_service="InitiatorService",
        origin_database="AW",
        is_initiator=False,
        message_type="//Orders/Request",
        body=b"12345",
        hops_remaining=3,
        time_to_live_ms=2500,
        enqueued_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    decoded = avro.decode_message(avro.encode_message(record))
    assert decoded["expires_at"] == datetime(2026, 1, 1, 0, 0, 2, 500000, tzinfo=UTC)
    outbound = avro.message_record_to_model(decoded, avro.message_origin(decoded, inbound=False))
    assert outbound.id == "m1"
    assert outbound.service == "OrderParts"
    assert outbound.broker_instance == "5fb8d92b-ed69-4c80-afbb-2aa6a7d3cb2d"
    assert outbound.origin == "AW"
    assert outbound.from_target is True
    assert outbound.hops_remaining == 3
    assert outbound.time_to_live_s == 2.5
    assert outbound.size_bytes == 5
    assert outbound.message_type == "//Orders/Request"
    inbound = avro.message_record_to_model(decoded, avro.message_origin(decoded, inbound=True))
    assert inbound.origin == REMOTE
    assert inbound.is_remote


def test_outbound_message_without_origin_database_is_malformed() -> None:
    record = avro.new_message_record(
        message_id="m1",
        conversation_id="c1",
        to_service="S",
        from_service="F",
        enqueued_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    with pytest.raises(MalformedRecord, match="origin_database"):
        avro.message_origin(record, inbound=False)


def test_instance_conversion_keeps_every_field() -> None:
    instance = Instance(
        name="i1",
        address="TCP://i1.example:4022",
        forwarding=True,
        forward_size_mb=3,
        retry_s=1.5,
        databases=(
            Database("AW", "0a0a0a0a-0000-0000-0000-000000000001", True, ("A", "B")),
            Database("msdb", "0d0d0d0d-0000-0000-0000-000000000001", False, ()),
        ),
    )
    assert (
        avro.record_to_instance(avro.decode_catalog(avro.encode_catalog(avro.catalog_to_record(instance))))
        == instance
    )


def _valid_message_bytes() -> bytes:
    return avro.encode_message(
        avro.new_message_record(
            message_id="m1",
            conversation_id="c1",
            to_service="S",
            from_service="F",
            origin_database="AW",
            body=b"payload",
            enqueued_at=datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=1),
        )
    )


@pytest.mark.parametrize("decode", [avro.decode_message, avro.decode_route, avro.decode_catalog])
def test_empty_bytes_are_malformed(decode: Callable[[bytes | None], dict]) -> None:
    with pytest.raises(MalformedRecord, match="could not decode 0 bytes"):
        decode(b"")


@pytest.mark.parametrize("decode", [avro.decode_message, avro.decode_route, avro.decode_catalog])
def test_null_value_is_malformed(decode: Callable[[bytes | None], dict]) -> None:
    with pytest.raises(MalformedRecord, match="no value"):
        decode(None)


def test_every_truncation_of_a_message_is_malformed() -> None:
    data = _valid_message_bytes()
    for cut in range(len(data)):
        with pytest.raises(MalformedRecord, match=r"expected Avro router\.v1\.Message"):
            avro.decode_message(data[:cut])


def test_trailing_bytes_are_malformed() -> None:
    with pytest.raises(MalformedRecord, match=r"only .* form a record"):
        avro.decode_message(_valid_message_bytes() + b"\x00")


def test_error_names_schema_and_size_and_chains_the_cause() -> None:
    with pytest.raises(MalformedRecord) as info:
        avro.decode_message(b"\x02\xff" + bytes(15))
    assert "message record: expected Avro router.v1.Message, could not decode 17 bytes" in str(info.value)
    assert info.value.__cause__ is not None


@settings(max_examples=300)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_malformed(data: bytes) -> None:
    for decode in (avro.decode_message, avro.decode_route, avro.decode_catalog):
        with contextlib.suppress(MalformedRecord):
            decode(data)


def test_encode_rejects_unknown_and_mistyped_fields() -> None:
    with pytest.raises(MalformedRecord, match=r"unknown field.*colour"):
        avro.encode_route({"scope": "AW", "name": "r", "address": "LOCAL", "colour": "red"})
    with pytest.raises(MalformedRecord, match="hops_remaining"):
        avro.encode_message({**avro.decode_message(_valid_message_bytes()), "hops_remaining": "many"})


def test_schema_json_is_the_avsc_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in avro.SCHEMA_NAMES:
        parsed = json.loads(avro.schema_json(name))
        assert parsed["namespace"] == "router.v1"
    with pytest.raises(ConfigError, match="expected one of"):
        avro.schema_json("nope")
    monkeypatch.setenv(avro.SCHEMAS_ENV, str(tmp_path))
    with pytest.raises(ConfigError, match="cannot read"):
        avro.schema_json("route")
