"""Every module of the package imports on its own, first: no import cycle hides behind the order in
which the tests or the commands happen to import them (an endpoint's metrics once imported the
endpoint package that imported them)."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import streaming


def test_every_module_imports_first() -> None:
    names = sorted(m.name for m in pkgutil.walk_packages(streaming.__path__, "streaming."))
    assert "streaming.endpoint.metrics" in names and "streaming.spark.job" in names
    saved = {k: v for k, v in sys.modules.items() if k == "streaming" or k.startswith("streaming.")}
    failed: dict[str, str] = {}
    try:
        for name in names:
            for loaded in [k for k in sys.modules if k == "streaming" or k.startswith("streaming.")]:
                del sys.modules[loaded]
            try:
                importlib.import_module(name)
            except ImportError as exc:
                failed[name] = str(exc)
    finally:
        for loaded in [k for k in sys.modules if k == "streaming" or k.startswith("streaming.")]:
            del sys.modules[loaded]
        sys.modules.update(saved)
    assert not failed, failed


def test_the_status_command_and_the_topology_import_no_spark() -> None:
    """`router status` reads Kafka only: importing it (and `streaming.topology`, the topics it
    checks) loads no pyspark, in a fresh interpreter."""
    code = (
        "import sys, streaming.commands.status, streaming.observe.status, streaming.topology; "
        "print(sorted(m for m in sys.modules if m == 'pyspark' or m.startswith('pyspark.')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout
