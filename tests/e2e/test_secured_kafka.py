"""Every command against a broker that requires TLS and SASL/PLAIN: one connection setting, read once.

The settings file's `kafka` section (streaming/kafka/connection.py) is all a user writes: the
table commands, `send`, the Spark job (`replay`) and `tail` connect with it, and a client without
it is refused by the broker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from streaming import topics
from streaming.devtools.embedded_kafka import EmbeddedKafka
from streaming.errors import KafkaUnavailable
from streaming.kafka.admin import topic_names

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
PASSWORD_ENV = "ROUTER_TEST_KAFKA_PASSWORD"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedKafka]:
    with EmbeddedKafka(
        tmp_path_factory.mktemp("sasl-kafka"), sasl_users={"router": "router-secret"}, tls=True
    ) as broker:
        yield broker


def router(*args: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streaming.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, **env},
    )


def test_every_command_connects_with_the_settings_files_tls_and_sasl_settings(
    secured: EmbeddedKafka, tmp_path: Path
) -> None:
    bootstrap = secured.bootstrap
    # The broker refuses a client without the credentials: the settings below are what gets through.
    with pytest.raises(KafkaUnavailable, match="without security settings"):
        topic_names(bootstrap, timeout=3)

    prefix = f"sasl{uuid.uuid4().hex[:8]}"
    settings = tmp_path / "router.yaml"
    settings.write_text(
        f"instance: i1\nbootstrap: {bootstrap}\ntopic_prefix: {prefix}\n"
        f"checkpoint_dir: {tmp_path / 'checkpoints'}\n"
        "kafka:\n  security_protocol: SASL_SSL\n  sasl_mechanism: PLAIN\n"
        f"  sasl_username: router\n  sasl_password_env: {PASSWORD_ENV}\n"
        f"  ssl_ca_location: {secured.ca_file}\n"
    )
    # ROUTER_CONFIG stands for --config on every command; ROUTER_BOOTSTRAP must not mask the file's.
    env = {"ROUTER_CONFIG": str(settings), PASSWORD_ENV: "router-secret", "ROUTER_BOOTSTRAP": ""}
    demo = ROOT / "routes" / "demo"
    common = ("--topic-prefix", prefix)

    for step in (
        ("catalogs", "load", str(demo / "catalogs.yaml"), *common),
        ("routes", "load", str(demo / "routes.yaml"), *common),
        (
            "send",
            "--instance",
            "i1",
            "--from-database",
            "AW",
            "--to-service",
            "OrderParts",
            "--count",
            "5",
            *common,
        ),
    ):
        done = router(*step, env=env)
        assert done.returncode == 0, (step, done.stderr[-3000:])
    listed = router("routes", "list", *common, env=env)
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert "OrderPartsRoute" in listed.stdout

    replayed = router("replay", env=env, timeout=600)
    assert replayed.returncode == 0, replayed.stderr[-3000:]

    tailed = router(
        "tail",
        topics.inbound_topic("f1", prefix),  # i1 sends OrderParts to i2 through the forwarder f1
        "--from-beginning",
        "--max",
        "5",
        "--timeout",
        "30",
        "--json",
        "--config",
        str(settings),
        env={PASSWORD_ENV: "router-secret", "ROUTER_BOOTSTRAP": ""},
    )
    assert tailed.returncode == 0, tailed.stderr[-3000:]
    records = [json.loads(line) for line in tailed.stdout.splitlines()]
    assert len(records) == 5
    assert {r["headers"]["outcome"] for r in records} == {"send"}
    assert {r["value"]["to_service"] for r in records} == {"OrderParts"}

    # Without the variable that holds the password, a command says which one to set.
    unset = {k: v for k, v in env.items() if k != PASSWORD_ENV}
    refused = router("routes", "list", *common, env=unset)
    assert refused.returncode == 2
    assert PASSWORD_ENV in refused.stderr
