"""Issue 42 §5: commands that read an empty table or wait for records say so, and what to do."""

from __future__ import annotations

import uuid

import pytest

from streaming import topics
from streaming.cli import main
from streaming.kafka.admin import ensure_topics
from streaming.rules.model import Database, Instance, Route
from streaming.tables.topic_io import publish_catalogs, put_route

pytestmark = pytest.mark.integration

I1 = Instance("i1", "TCP://i1:4022", (Database("AW", "0a0a0a0a-0000-0000-0000-000000000001", True, ("S",)),))


def test_an_empty_routes_or_catalogs_topic_names_the_prefixes_that_hold_one(
    kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo writes under its own prefix: `routes list` under another one says where to look."""
    # The hint names the first few prefixes in order; on a broker other tests share, "0" sorts first.
    loaded, empty = f"0hint{uuid.uuid4().hex[:8]}", f"none{uuid.uuid4().hex[:8]}"
    publish_catalogs(kafka_bootstrap, [I1], topics.catalogs_topic(loaded))
    put_route(kafka_bootstrap, "i1", Route("AW", "Local", "LOCAL"), topics.routes_topic(loaded))
    ensure_topics(kafka_bootstrap, [topics.routes_topic(empty), topics.catalogs_topic(empty)], compacted=True)
    for command, topic in (
        ("routes", topics.routes_topic(empty)),
        ("catalogs", topics.catalogs_topic(empty)),
    ):
        assert main([command, "list", "--bootstrap", kafka_bootstrap, "--topic-prefix", empty]) == 0
        out, err = capsys.readouterr()
        assert topic in out, out  # the summary names the topic it read
        assert f"{topic} holds nothing; other prefixes hold one (" in err, err
        assert loaded in err and "--topic-prefix" in err, err
        assert main([command, "list", "--json", "--bootstrap", kafka_bootstrap, "--topic-prefix", empty]) == 0
        out, err = capsys.readouterr()
        assert out == "" and loaded in err, (out, err)  # stdout stays the program's output
    assert main(["routes", "list", "--bootstrap", kafka_bootstrap, "--topic-prefix", loaded]) == 0
    assert "holds nothing" not in capsys.readouterr().err


def test_tail_says_on_stderr_that_it_waits_for_new_records(
    kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = f"tailhint.{uuid.uuid4().hex[:8]}.outbound"
    ensure_topics(kafka_bootstrap, [topic])
    assert main(["tail", topic, "--timeout", "1", "--bootstrap", kafka_bootstrap]) == 0
    out, err = capsys.readouterr()
    assert out == ""
    assert f"waiting for new records on {topic} (--from-beginning prints those it holds)" in err, err
    assert main(["tail", topic, "--from-beginning", "--timeout", "1", "--bootstrap", kafka_bootstrap]) == 0
    assert "waiting for new records" not in capsys.readouterr().err
