"""jvm/state/pom.xml compiles the router's JVM half against the jars pyspark ships, version for version.

The classes run inside pyspark's JVM, so every `provided` dependency of the pom must be a jar of
pyspark/jars at the same version (the Kafka connector, which pyspark does not ship, must be the
version of pyspark and of jvm/spark/pom.xml, which copies it). An upgrade of pyspark fails here,
naming the property to change, before anything is compiled against the wrong Spark.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pyspark

ROOT = Path(__file__).resolve().parents[2]
STATE_POM = ROOT / "jvm" / "state" / "pom.xml"
SPARK_POM = ROOT / "jvm" / "spark" / "pom.xml"
PYSPARK_JARS = Path(pyspark.__file__).parent / "jars"
NS = {"m": "http://maven.apache.org/POM/4.0.0"}
CONNECTOR = "spark-sql-kafka-0-10_"


def properties(pom: Path) -> dict[str, str]:
    found = ET.parse(pom).getroot().find("m:properties", NS)
    assert found is not None, f"{pom} has no <properties>"
    return {child.tag.split("}")[1]: (child.text or "").strip() for child in found}


def resolved(text: str, props: dict[str, str]) -> str:
    return re.sub(r"\$\{([^}]+)\}", lambda m: props[m.group(1)], text)


def provided(pom: Path) -> list[tuple[str, str, str]]:
    """(artifact, version, the version's text as written) of every `provided` dependency."""
    props = properties(pom)
    out = []
    for dep in ET.parse(pom).getroot().iterfind("m:dependencies/m:dependency", NS):
        if dep.findtext("m:scope", namespaces=NS) != "provided":
            continue
        written = dep.findtext("m:version", namespaces=NS) or ""
        artifact = resolved(dep.findtext("m:artifactId", namespaces=NS) or "", props)
        out.append((artifact, resolved(written, props), written))
    return out


def test_the_state_pom_pins_the_versions_of_pyspark_s_jars() -> None:
    shipped = {p.name for p in PYSPARK_JARS.glob("*.jar")}
    assert shipped, f"expected pyspark's jars in {PYSPARK_JARS}"
    dependencies = provided(STATE_POM)
    assert len(dependencies) >= 10, dependencies
    wrong = []
    for artifact, version, written in dependencies:
        if artifact.startswith(CONNECTOR):
            continue
        if f"{artifact}-{version}.jar" not in shipped:
            ships = sorted(n for n in shipped if re.fullmatch(rf"{re.escape(artifact)}-\d[^-]*\.jar", n))
            wrong.append(
                f"{artifact}: jvm/state/pom.xml pins {version} ({written}), "
                f"pyspark {pyspark.__version__} ships {ships or 'no such jar'}"
            )
    assert not wrong, "set the pom's versions to pyspark's jars: " + "; ".join(wrong)


def test_the_kafka_connector_is_pyspark_s_version_in_both_poms() -> None:
    connector = [(a, v) for a, v, _ in provided(STATE_POM) if a.startswith(CONNECTOR)]
    assert [v for _, v in connector] == [pyspark.__version__], (
        f"expected the Kafka connector at pyspark's version {pyspark.__version__} in {STATE_POM}, "
        f"found {connector}"
    )
    assert properties(SPARK_POM)["spark.version"] == pyspark.__version__, (
        f"expected spark.version {pyspark.__version__} in {SPARK_POM} (it copies the connector's jars)"
    )


def test_the_build_turns_every_lint_warning_into_an_error() -> None:
    pom = STATE_POM.read_text()
    assert "<arg>-Xlint:all</arg>" in pom and "<arg>-Werror</arg>" in pom
    assert "<maven.compiler.release>17</maven.compiler.release>" in pom
