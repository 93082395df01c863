"""Write the JVM's copy of the Python/JVM contract (`streaming.contract`) as Java.

    python scripts/contract_java.py            # write jvm/state/src/router/contract/Contract.java
    python scripts/contract_java.py --check    # exit 1, saying so, when the file is not current

The Java class holds the same names in the same order, each with its Python docstring, as
`public static final` fields: an enum's members as `OUTCOME_DELIVER`, `REASON_NO_ROUTE`, ...;
a tuple of words as a `String[]`, and each of the steps (`MATCH_STEPS`, `CHOICE_STEPS`) and of the
headers also as a constant of its own (`M1`, `C2`, `HEADER_OUTCOME`); a mapping of words to numbers
as one `int` per word (`STATE_KIND_MESSAGE`); a word as a `String`, a number as an `int`.
"""

from __future__ import annotations

import argparse
import ast
import sys
import textwrap
from enum import Enum
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "streaming" / "contract.py"
TARGET = ROOT / "jvm" / "state" / "src" / "router" / "contract" / "Contract.java"
STEP_TUPLES = ("MATCH_STEPS", "CHOICE_STEPS")
"""Tuples whose words are also constants of their own (the rule ids a decision names)."""
NAMED_TUPLES = {"MESSAGE_HEADERS": "HEADER"}
"""Tuples whose words are also constants of their own, named with a prefix (`HEADER_OUTCOME`)."""


def _javadoc(text: str | None, indent: str = "  ") -> list[str]:
    if not text:
        return []
    body = " ".join(line.strip() for line in text.strip().splitlines())
    body = body.replace("*/", "* /").replace("`", "")
    if len(indent) + len(body) + 7 <= 100:
        return [f"{indent}/** {body} */"]
    lines = textwrap.wrap(body, width=100 - len(indent) - 3)
    return [f"{indent}/**"] + [f"{indent} * {line}" for line in lines] + [f"{indent} */"]


def _array(name: str, values: tuple[object, ...] | list[object]) -> list[str]:
    """A `String[]` field, its words wrapped at 100 columns."""
    head = f"  public static final String[] {name} = {{"
    words = [_literal(v) for v in values]
    one = head + ", ".join(words) + "};"
    if len(one) <= 100:
        return [one]
    lines = [head]
    line = "   "
    for word in words:
        if len(line) + len(word) + 2 > 100:
            lines.append(line.rstrip())
            line = "   "
        line += f" {word},"
    lines.append(line.rstrip().rstrip(","))
    lines.append("  };")
    return lines


def _literal(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise TypeError(f"the contract holds only words and numbers, got {value!r}")
    if isinstance(value, int):
        return str(value)
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _declarations(module: dict[str, object]) -> list[tuple[str, str | None]]:
    """The module's public names in source order, each with the docstring that follows it."""
    tree = ast.parse(SOURCE.read_text(encoding="utf-8"))
    found: list[tuple[str, str | None]] = []
    body = tree.body
    for i, node in enumerate(body):
        name = None
        if isinstance(node, ast.ClassDef):
            name = node.name
            found.append((name, ast.get_docstring(node)))
            continue
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
        if name is None or name.startswith("_") or name not in module:
            continue
        after = body[i + 1] if i + 1 < len(body) else None
        doc = (
            after.value.value
            if isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
            else None
        )
        found.append((name, doc))
    return found


def _member_docs(cls_name: str) -> dict[str, str]:
    tree = ast.parse(SOURCE.read_text(encoding="utf-8"))
    docs: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls_name:
            for i, item in enumerate(node.body):
                if isinstance(item, ast.Assign) and isinstance(item.targets[0], ast.Name):
                    after = node.body[i + 1] if i + 1 < len(node.body) else None
                    if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant):
                        docs[item.targets[0].id] = str(after.value.value)
    return docs


def render() -> str:
    """The Java source of `router.contract.Contract`, from `streaming.contract`."""
    sys.path.insert(0, str(ROOT))
    import streaming.contract as contract

    module = vars(contract)
    out = [
        "package router.contract;",
        "",
        "/**",
        " * The words the Python half and the JVM half of the router share: generated from",
        " * {@code streaming/contract.py} by {@code scripts/contract_java.py}, which says why. Do not edit:",
        " * change the Python module and run {@code python scripts/contract_java.py}; a unit test",
        " * ({@code tests/unit/test_contract.py}) fails while this file differs from what it writes.",
        " */",
        "public final class Contract {",
        "  private Contract() {}",
    ]
    for name, doc in _declarations(module):
        value = module[name]
        out.append("")
        if isinstance(value, type) and issubclass(value, Enum):
            prefix = name.upper()
            out += [f"  // {name}: {line}" for line in (doc or "").splitlines()[:1]]
            member_docs = _member_docs(name)
            for member in value:
                out += _javadoc(member_docs.get(member.name))
                out.append(f"  public static final String {prefix}_{member.name} = {_literal(member.value)};")
            out.append(f"  /** Every {name.lower()}, in the Python enum's order. */")
            out += _array(f"{prefix}S", [m.value for m in value])
            continue
        out += _javadoc(doc)
        if isinstance(value, tuple):
            out += _array(name, value)
            if name in STEP_TUPLES:
                out += [f"  public static final String {v} = {_literal(v)};" for v in value]
            if name in NAMED_TUPLES:
                out += [
                    f"  public static final String {NAMED_TUPLES[name]}_{str(v).upper()} = {_literal(v)};"
                    for v in value
                ]
        elif isinstance(value, dict):
            for key, number in value.items():
                field = f"{name.removesuffix('S')}_{key.upper()}"
                out.append(f"  public static final int {field} = {_literal(number)};")
        elif isinstance(value, int) and not isinstance(value, bool):
            out.append(f"  public static final int {name} = {_literal(value)};")
        else:
            out.append(f"  public static final String {name} = {_literal(value)};")
    out.append("}")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the Java file, or with `--check` only compare it; 1 when it is not current."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only say whether the Java file is current")
    args = parser.parse_args(argv)
    text = render()
    current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else None
    if args.check:
        if current != text:
            print(
                f"{TARGET.relative_to(ROOT)} is not what streaming/contract.py gives: "
                "run `python scripts/contract_java.py`",
                file=sys.stderr,
            )
            return 1
        return 0
    TARGET.parent.mkdir(parents=True, exist_ok=True)
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
