"""The runtime packages import nothing from the development tools (`streaming.devtools`).

The streaming job, the rules, the tables, the Kafka clients, the endpoints and the observers run in
production; the embedded broker and the scenario runner are for development, demos and
conformance. Only the commands that exist for those (`router kafka`, `router spark cluster`,
`router demo`, `router resolve`) and the tools themselves may import them.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "streaming"
MAY_IMPORT = {
    "streaming/commands/kafka.py",
    "streaming/commands/spark.py",
    "streaming/commands/demo.py",
    "streaming/commands/resolve.py",
}


def devtools_imports(source: str) -> list[str]:
    """The `streaming.devtools` modules a source imports, at any depth (a lazy import counts too)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("streaming.devtools"):
            found.append(str(node.module))
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("streaming.devtools")]
    return found


def test_no_runtime_module_imports_the_development_tools() -> None:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = str(path.relative_to(ROOT))
        if name.startswith("streaming/devtools/") or name in MAY_IMPORT:
            continue
        if imports := devtools_imports(path.read_text(encoding="utf-8")):
            found[name] = imports
    assert not found, f"runtime modules import the development tools: {found}"


def test_the_check_finds_an_import() -> None:
    source = "def f() -> None:\n    from streaming.devtools.embedded_kafka import EmbeddedKafka\n"
    assert devtools_imports(source) == ["streaming.devtools.embedded_kafka"]
    loader = "streaming.devtools.scenario.loader"
    assert devtools_imports(f"import {loader}\n") == [loader]
    assert devtools_imports("from streaming.kafka import admin\n") == []
