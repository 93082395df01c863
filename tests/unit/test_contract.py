"""The Python/JVM contract is declared once (streaming/contract.py) and the JVM's copy is current.

* `router.contract.Contract` is exactly what `scripts/contract_java.py` writes from the module;
* no other file of either half declares a word of the contract again: no Java `static final`
  field and no Python module-level name is given one of its words as a literal (they take it from
  the contract), so a word changed in one place cannot leave a stale copy in another.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path
from types import ModuleType

from streaming import contract

ROOT = Path(__file__).resolve().parents[2]
JAVA_SOURCES = ROOT / "jvm" / "state" / "src"
GENERATED = JAVA_SOURCES / "router" / "contract" / "Contract.java"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("contract_java", ROOT / "scripts" / "contract_java.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def groups() -> dict[str, frozenset[str]]:
    """The contract's lists of words: a copy of a whole one elsewhere is a second declaration."""
    return {
        "outcomes": frozenset(o.value for o in contract.Outcome),
        "reasons": frozenset(r.value for r in contract.Reason),
        "headers": frozenset(contract.MESSAGE_HEADERS),
        "decision columns": frozenset(contract.DECISION_COLUMNS),
        "kept columns": frozenset(contract.KEPT_COLUMNS),
        "choice identity columns": frozenset(contract.CHOICE_IDENTITY_COLUMNS),
        "state identity columns": frozenset(contract.STATE_IDENTITY_COLUMNS),
        "instance topic kinds": frozenset(contract.INSTANCE_TOPIC_KINDS),
    }


def vocabulary() -> set[str]:
    """Every word of the contract's lists and names."""
    words: set[str] = set().union(*groups().values())
    for name in (
        "STATE_KEY_COLUMN",
        "STATE_KIND_COLUMN",
        "STATE_AT_COLUMN",
        "FIRST_COLUMN",
        "STATE_VARIABLE",
    ):
        words.add(getattr(contract, name))
    return words


def distinctive() -> set[str]:
    """The words that mean the contract wherever they appear: reasons, and the columns' own names."""
    words = {r.value for r in contract.Reason}
    return words | {w for w in vocabulary() if re.match(r"(c|d|k|kept)_", w)} | {contract.FIRST_COLUMN}


def redeclared(literals: set[str]) -> list[str]:
    """What a literal declaration copies: a distinctive word, or a whole list of the contract's."""
    copies = sorted(literals & distinctive()) if len(literals) == 1 else []
    return copies + [name for name, words in groups().items() if len(words) > 1 and words <= literals]


def test_the_java_contract_is_what_the_python_module_gives() -> None:
    expected = _generator().render()
    assert GENERATED.read_text(encoding="utf-8") == expected, (
        "jvm/state/src/router/contract/Contract.java is not what streaming/contract.py gives: "
        "run `python scripts/contract_java.py`"
    )


def test_the_java_contract_holds_every_word() -> None:
    text = GENERATED.read_text(encoding="utf-8")
    for word in vocabulary():
        assert f'"{word}"' in text, word


_JAVA_FIELD = re.compile(
    r'static\s+final\s+(?:String|UTF8String)\s+(\w+)\s*=\s*(?:UTF8String\.fromString\()?"([^"]*)"'
)
_JAVA_ARRAY = re.compile(r"static\s+final\s+String\[\]\s+(\w+)\s*=\s*\{([^}]*)\}")


def java_redeclarations(source: str) -> list[str]:
    """Java fields (other than the contract's) that declare words of the contract as literals."""
    found = [f"{name}: {copy}" for name, word in _JAVA_FIELD.findall(source) for copy in redeclared({word})]
    for name, body in _JAVA_ARRAY.findall(source):
        found += [f"{name}: {copy}" for copy in redeclared(set(re.findall(r'"([^"]*)"', body)))]
    return found


def test_no_java_file_declares_a_word_of_the_contract_again() -> None:
    found = {
        str(path.relative_to(ROOT)): java_redeclarations(path.read_text(encoding="utf-8"))
        for path in sorted(JAVA_SOURCES.rglob("*.java"))
        if path != GENERATED
    }
    found = {path: fields for path, fields in found.items() if fields}
    assert not found, f"take these from router.contract.Contract: {found}"


def python_redeclarations(source: str) -> list[str]:
    """Module-level names given words of the contract as literals (a word, a tuple or list of them)."""
    found = []
    for node in ast.parse(source).body:
        if not isinstance(node, ast.Assign) or not isinstance(
            node.value, (ast.Constant, ast.Tuple, ast.List)
        ):
            continue
        literals = {
            n.value for n in ast.walk(node.value) if isinstance(n, ast.Constant) and isinstance(n.value, str)
        }
        names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        found += [f"{names[0]}: {copy}" for copy in redeclared(literals) if names]
    return found


def test_no_python_module_declares_a_word_of_the_contract_again() -> None:
    found = {
        str(path.relative_to(ROOT)): python_redeclarations(path.read_text(encoding="utf-8"))
        for path in sorted((ROOT / "streaming").rglob("*.py"))
        if path.name != "contract.py"
    }
    found = {path: names for path, names in found.items() if names}
    assert not found, f"take these from streaming.contract: {found}"


def test_the_redeclaration_checks_find_a_copy() -> None:
    """The checks above can fail: a copied word or list is found in either language."""
    assert java_redeclarations('  static final String NO_ROUTE = "no_route";') == ["NO_ROUTE: no_route"]
    assert java_redeclarations('static final String KEY = "c_key";') == ["KEY: c_key"]
    outcomes = ", ".join(f'"{o.value}"' for o in contract.Outcome)
    assert java_redeclarations(f"static final String[] ALL = {{{outcomes}}};") == ["ALL: outcomes"]
    assert python_redeclarations(f"OUTCOMES = ({outcomes})\n") == ["OUTCOMES: outcomes"]
    assert python_redeclarations('WHY = "hops_exhausted"\n') == ["WHY: hops_exhausted"]
    assert python_redeclarations('FIELDS = ("address", "scope")\nLABEL = "route"\n') == []
