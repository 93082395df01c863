"""docker-compose.yml and the Dockerfile agree with docs/deployment.md and with `router kafka start`.

No Docker engine runs these tests: they read the files. docs/deployment.md says: the broker answers on
127.0.0.1:19092 (the same address as the embedded broker), Spark's master on 7077 with its UI on
8080, the worker's UI on 8081, the job's Spark UI on 4040, all published on 127.0.0.1 only; the
Spark images run the same Spark version as the pyspark that pyproject.toml pins.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from streaming.commands.common import DEFAULT_BOOTSTRAP
from streaming.devtools.embedded_kafka import DEFAULT_PORT, HOST

ROOT = Path(__file__).resolve().parents[2]
KAFKA_IMAGE = "apache/kafka:4.1.1"


def pinned_pyspark() -> str:
    """The pyspark version pinned in pyproject.toml: the driver's Spark, which the cluster must match."""
    match = re.search(r'"pyspark==([0-9.]+)"', (ROOT / "pyproject.toml").read_text())
    assert match, "expected pyspark pinned as pyspark==X.Y.Z in pyproject.toml"
    return match.group(1)


SPARK_IMAGE = re.compile(rf"apache/spark:{re.escape(pinned_pyspark())}(-[a-z0-9.-]+)?")
# service -> the host ports docs/deployment.md documents for it
DOCUMENTED_PORTS = {"kafka": {19092}, "spark-master": {7077, 8080}, "spark-worker": {8081}, "router": {4040}}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def published(service: dict[str, Any]) -> dict[int, tuple[str, int]]:
    """host port -> (host address, container port), from "addr:host:container" entries."""
    result = {}
    for entry in service.get("ports", []):
        address, host_port, container_port = str(entry).split(":")
        result[int(host_port)] = (address, int(container_port))
    return result


def test_services_are_the_documented_ones(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == set(DOCUMENTED_PORTS)


def test_published_ports_are_the_documented_ones_on_loopback(compose: dict[str, Any]) -> None:
    for name, ports in DOCUMENTED_PORTS.items():
        mapping = published(compose["services"][name])
        assert set(mapping) == ports, name
        assert {address for address, _ in mapping.values()} == {"127.0.0.1"}, name


def test_kafka_is_pinned_kraft_and_answers_where_the_embedded_broker_does(compose: dict[str, Any]) -> None:
    kafka = compose["services"]["kafka"]
    env = kafka["environment"]
    assert kafka["image"] == KAFKA_IMAGE
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert "EXTERNAL://0.0.0.0:19092" in env["KAFKA_LISTENERS"].split(",")
    assert f"EXTERNAL://{HOST}:{DEFAULT_PORT}" in env["KAFKA_ADVERTISED_LISTENERS"].split(",")
    assert published(kafka)[DEFAULT_PORT] == (HOST, DEFAULT_PORT)
    assert f"{HOST}:{DEFAULT_PORT}" == DEFAULT_BOOTSTRAP
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "true"  # as the embedded broker, see its docstring


def test_spark_master_and_worker_run_the_pinned_image(compose: dict[str, Any]) -> None:
    master, worker = compose["services"]["spark-master"], compose["services"]["spark-worker"]
    assert SPARK_IMAGE.fullmatch(master["image"]) and worker["image"] == master["image"]
    assert "org.apache.spark.deploy.master.Master" in master["command"]
    assert "org.apache.spark.deploy.worker.Worker" in worker["command"]
    assert worker["command"][-1] == "spark://spark-master:7077"
    assert "spark-master" in worker["depends_on"]


def test_router_job_is_built_here_and_runs_router_run(compose: dict[str, Any]) -> None:
    router = compose["services"]["router"]
    assert router["build"] == {"context": ".", "dockerfile": "Dockerfile"}
    assert router["command"][:3] == ["router", "run", "--config"]
    assert router["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert router["environment"]["ROUTER_BOOTSTRAP"] == "kafka:9092"
    assert router["environment"]["ROUTER_SPARK_MASTER"] == "spark://spark-master:7077"


def test_dockerfile_uses_the_spark_image_and_the_spark_pom() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    base = re.search(r"^FROM (\S+)", dockerfile, re.MULTILINE)
    assert base is not None and SPARK_IMAGE.fullmatch(base.group(1))
    assert "jvm/spark/pom.xml" in dockerfile
    assert (ROOT / "jvm" / "spark" / "pom.xml").is_file()


def test_connector_jars_are_for_the_pinned_spark() -> None:
    pom = (ROOT / "jvm" / "spark" / "pom.xml").read_text()
    assert f"<spark.version>{pinned_pyspark()}</spark.version>" in pom
