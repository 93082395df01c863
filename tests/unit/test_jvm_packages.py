"""The JVM half keeps its pure packages apart from Spark: the rules, the memory, the names, the contract.

`router.rules` (the decision), `router.state` (the conversation memory), `router.naming` (the topic
names) and `router.contract` (the shared words) are plain Java, replayed by the JUnit tests without
Spark; the adapters that run them inside a query live in `router.spark` (and `router.plan`,
`router.metrics`, `router.avro`, `router.fs`). A Spark, Hadoop or Scala name in a pure package fails
here, by import or written out in the code, naming the file, the line and the package to move it to.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "jvm" / "state" / "src" / "router"
PURE = ("rules", "state", "naming", "contract")
"""The packages under jvm/state/src/router that must not reach Spark, Hadoop or Scala."""
ADAPTERS = "spark"
"""Where the classes that run the pure rules inside Spark live."""

_FORBIDDEN = re.compile(r"(?<![\w.])(org\.apache\.spark|org\.apache\.hadoop|scala)\.[\w.]+")
_COMMENT_OR_TEXT = re.compile(
    r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'',
    re.DOTALL,
)


def _blanked(source: str) -> str:
    """`source` with its comments and literals blanked out, its line breaks kept (so lines still count)."""
    return _COMMENT_OR_TEXT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), source)


def forbidden_names(source: str) -> list[tuple[int, str]]:
    """(line, name) of each Spark, Hadoop or Scala name the code of `source` uses, imports included."""
    code = _blanked(source)
    return [(code.count("\n", 0, m.start()) + 1, m.group(0)) for m in _FORBIDDEN.finditer(code)]


def java_files(package: str) -> list[Path]:
    return sorted((SOURCES / package).rglob("*.java"))


def test_the_check_finds_imports_and_names_written_out_but_not_comments_or_text() -> None:
    source = "\n".join(
        [
            "package router.rules;",
            "import java.util.List;",
            "import org.apache.spark.sql.types.StructType;",
            "import static scala.Predef.println;",
            "/** Unlike {@code org.apache.spark.sql.Row}, see scala.Option. */",
            'final class X { String s = "org.apache.hadoop.fs.Path"; // org.apache.spark.rdd.RDD',
            "  scala.Option<Object> o; org.apache.hadoop.fs.Path p; my.scala.Thing t; }",
        ]
    )
    assert forbidden_names(source) == [
        (3, "org.apache.spark.sql.types.StructType"),
        (4, "scala.Predef.println"),
        (7, "scala.Option"),
        (7, "org.apache.hadoop.fs.Path"),
    ]


@pytest.mark.parametrize("package", PURE)
def test_a_pure_package_names_no_spark_hadoop_or_scala(package: str) -> None:
    files = java_files(package)
    assert files, f"expected Java sources under {SOURCES / package}, found none: was the package moved?"
    found = [
        f"{path.relative_to(ROOT)}:{line}: {name}"
        for path in files
        for line, name in forbidden_names(path.read_text(encoding="utf-8"))
    ]
    assert not found, (
        f"router.{package} must stay plain Java (the JUnit tests run it without Spark), but it uses:\n  "
        + "\n  ".join(found)
        + f"\nMove the code that needs them to router.{ADAPTERS}; keep the rule itself in router.{package}."
    )


def test_the_adapters_are_where_spark_is() -> None:
    """The scan sees Spark where it is: each class of the adapter package uses it."""
    files = java_files(ADAPTERS)
    assert files, f"expected the Spark adapters under {SOURCES / ADAPTERS}, found none"
    plain = [str(path.relative_to(ROOT)) for path in files if not forbidden_names(path.read_text("utf-8"))]
    assert not plain, f"these classes of router.{ADAPTERS} use no Spark, so belong to a pure package: {plain}"
