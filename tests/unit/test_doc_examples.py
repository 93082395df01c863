"""docs/conversations.md's Python examples use the endpoint API as it is: every call and keyword exists.

They run against a broker and a router (as the integration tests of `streaming.endpoint` do); here
they are only read, so that a renamed method or argument cannot leave the document behind.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
from pathlib import Path

from streaming.endpoint import Dialog, Endpoint, Received

DOCUMENT = Path(__file__).resolve().parents[2] / "docs" / "conversations.md"
_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def python_blocks() -> list[ast.Module]:
    return [ast.parse(block) for block in _BLOCK.findall(DOCUMENT.read_text(encoding="utf-8"))]


def test_the_document_shows_a_service_of_about_ten_lines() -> None:
    blocks = _BLOCK.findall(DOCUMENT.read_text(encoding="utf-8"))
    assert blocks, "docs/conversations.md shows the endpoint examples"
    service = blocks[0].strip().splitlines()
    assert len(service) <= 10, f"the service example has {len(service)} lines"
    for tree in python_blocks():  # each parses
        assert tree.body


def test_every_name_the_examples_call_is_the_endpoint_apis() -> None:
    api = {name for kind in (Endpoint, Dialog, Received) for name in dir(kind)}
    api |= {f.name for kind in (Dialog, Received) for f in dataclasses.fields(kind)}
    parameters = {
        "Endpoint": set(inspect.signature(Endpoint).parameters),
        "begin_dialog": set(inspect.signature(Endpoint.begin_dialog).parameters),
        "receive": set(inspect.signature(Endpoint.receive).parameters),
        "messages": set(inspect.signature(Endpoint.messages).parameters),
    }
    used: set[str] = set()
    for tree in python_blocks():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                used.add(node.attr)
            if isinstance(node, ast.Call):
                name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
                if name in parameters:
                    unknown = {k.arg for k in node.keywords} - parameters[name]
                    assert not unknown, f"{name}() has no argument {unknown}"
    assert used, "the examples call the API"
    assert used <= api, f"not in the endpoint API: {sorted(used - api)}"
