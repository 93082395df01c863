"""Every module of the package imports on its own, first: no import cycle hides behind the order in
which the tests or the commands happen to import them (an endpoint's metrics once imported the
endpoint package that imported them)."""

from __future__ import annotations

import importlib
import pkgutil
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
