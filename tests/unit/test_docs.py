"""Every rule id, rule section and document the code cites is in the repository (docs/).

* Each rule id cited in `streaming/`, `jvm/` and `tests/` (M1-M7, C0-C5, K2, ...) is defined in
  docs/rules.md, as a line that starts with the id in bold.
* Each `docs/*.md` path named in the code, the tests, the README and the docs exists, and so does
  each relative link of the README and the docs (and its anchor, for a link into a document).
* Each section cited with `§` in the code is a section of docs/rules.md.
* No code cites a document that lives outside the repository.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
RULES = DOCS / "rules.md"
THIS = Path(__file__).resolve()

CODE_FOLDERS = ("streaming", "jvm", "tests", "bench")
"""Where the code and its tests live."""
RULE_FOLDERS = ("streaming", "jvm", "tests")
"""Where rule ids are collected."""
TEXT_SUFFIXES = frozenset(
    {".py", ".java", ".yaml", ".yml", ".md", ".toml", ".txt", ".json", ".avsc", ".sh", ".properties", ".xml"}
)

RULE_ID = re.compile(
    r"\b(?:C-drop|LP[1-3]|MI[1-5]|CL[1-5]|M[1-7]|C[0-5]|D[1-5]|K[1-3]|B[1-9]|F[1-7]|R(?:10|[1-9])"
    r"|L[1-5]|S[1-5]|T[1-4]|A[1-8])\b"
)
"""The rule id families of docs/rules.md, each with the numbers it has. Word-bounded, so that names
that only look alike (G1 the garbage collector, P1 a host, T0 an instant, S310 a linter code) are
not taken for rule ids."""
DEFINED = re.compile(r"^\*\*([A-Z]+[0-9]*(?:-drop)?)\*\*", re.MULTILINE)
SECTION_HEADING = re.compile(r"^#+ .*§(\d+(?:\.\d+)*)", re.MULTILINE)
SECTION_CITED = re.compile(r"(Issue \d+ )?§(\d+(?:\.\d+)*)")
"""A `§` citation; one that follows `Issue N` names a part of an issue, not of docs/rules.md."""
DOC_PATH = re.compile(r"\bdocs/[A-Za-z0-9_./-]*\.md\b")
LINK = re.compile(r"\]\(([^)\s]+)\)")
ANCHOR_ID = re.compile(r"<a id=\"([^\"]+)\"></a>")

OUTSIDE = re.compile(r"FORMAT\.md|STYLE\.md|\bSTYLE \d+|\bspec §", re.IGNORECASE)
"""How documents outside the repository were cited: the scenario format, the style guide, the spec."""


def text_files(*folders: str) -> Iterator[Path]:
    """Every text file under the folders, by path."""
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and path.suffix in TEXT_SUFFIXES and "__pycache__" not in path.parts:
                yield path


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8", errors="replace").splitlines()


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT)}:{line}"


def cited(pattern: re.Pattern[str], folders: tuple[str, ...]) -> dict[str, list[str]]:
    """Each match of `pattern` in the folders' files (this file left out), with where it is."""
    found: dict[str, list[str]] = {}
    for path in text_files(*folders):
        if path == THIS:
            continue
        for number, line in enumerate(lines_of(path), start=1):
            for match in pattern.finditer(line):
                found.setdefault(match.group(0), []).append(where(path, number))
    return found


def defined_ids(text: str) -> set[str]:
    return set(DEFINED.findall(text))


def rules_sections(text: str) -> set[str]:
    return set(SECTION_HEADING.findall(text))


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lowercase, punctuation dropped, spaces as hyphens."""
    kept = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return kept.replace(" ", "-")


def anchors(text: str) -> set[str]:
    headings = re.findall(r"^#+ (.+)$", text, re.MULTILINE)
    return set(ANCHOR_ID.findall(text)) | {github_anchor(h) for h in headings}


# ------------------------------------------------------------------------------------------ rule ids


def test_the_rule_id_pattern_takes_rule_ids_only() -> None:
    text = "M5 then C2; C-drop, LP2, MI3, CL4, R10 and K2 - but not G1, P1, T0, S310, M8, R11, A4x, xB3"
    assert RULE_ID.findall(text) == ["M5", "C2", "C-drop", "LP2", "MI3", "CL4", "R10", "K2"]


def test_the_code_cites_rule_ids() -> None:
    ids = cited(RULE_ID, RULE_FOLDERS)
    # Every family is cited somewhere: a pattern that found none would make the next test empty.
    families = {
        "M5",
        "C2",
        "C-drop",
        "K2",
        "D1",
        "B4",
        "F3",
        "S3",
        "R6",
        "L3",
        "T1",
        "MI2",
        "LP1",
        "A2",
        "CL4",
    }
    assert families <= set(ids)


def test_every_cited_rule_id_is_defined_in_docs_rules() -> None:
    defined = defined_ids(RULES.read_text(encoding="utf-8"))
    missing = {rule: places for rule, places in cited(RULE_ID, RULE_FOLDERS).items() if rule not in defined}
    assert not missing, "\n".join(
        f"docs/rules.md does not define {rule}, cited at {', '.join(places[:3])}"
        f"{' and more' if len(places) > 3 else ''}: add a line starting with **{rule}** to docs/rules.md, "
        "or correct the citation"
        for rule, places in sorted(missing.items())
    )


def test_a_missing_definition_is_found() -> None:
    """The check above fails when a definition goes: here, with M5's taken out of the text."""
    text = RULES.read_text(encoding="utf-8")
    without = re.sub(r"^\*\*M5\*\*", "M5", text, flags=re.MULTILINE)
    assert "M5" in defined_ids(text)
    assert "M5" not in defined_ids(without)


# ---------------------------------------------------------------------------------- sections, paths


def test_every_cited_section_is_a_section_of_docs_rules() -> None:
    sections = rules_sections(RULES.read_text(encoding="utf-8"))
    assert {"1.4", "1.7", "1.15"} <= sections
    missing: dict[str, list[str]] = {}
    for path in text_files(*CODE_FOLDERS):
        if path == THIS:
            continue
        for number, line in enumerate(lines_of(path), start=1):
            for match in SECTION_CITED.finditer(line):
                if match.group(1) is None and match.group(2) not in sections:
                    missing.setdefault(match.group(2), []).append(where(path, number))
    assert not missing, "\n".join(
        f"§{section}, cited at {', '.join(places)}, is no section heading of docs/rules.md: cite one "
        f"that is ({', '.join(sorted(sections))}) or add it"
        for section, places in sorted(missing.items())
    )


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]


def test_every_named_document_exists() -> None:
    named: dict[str, list[str]] = {}
    for path in [*text_files(*CODE_FOLDERS), *documents()]:
        if path == THIS:
            continue
        for number, line in enumerate(lines_of(path), start=1):
            for match in DOC_PATH.finditer(line):
                named.setdefault(match.group(0), []).append(where(path, number))
    assert "docs/rules.md" in named
    missing = {doc: places for doc, places in named.items() if not (ROOT / doc).is_file()}
    assert not missing, "\n".join(
        f"{doc}, named at {', '.join(places)}, does not exist" for doc, places in sorted(missing.items())
    )


@pytest.mark.parametrize("document", documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_of_a_document_resolves(document: Path) -> None:
    problems = []
    for number, line in enumerate(lines_of(document), start=1):
        for target in LINK.findall(line):
            if re.match(r"[a-z]+:", target):
                continue  # a URL, not a file of the repository
            file, _, anchor = target.partition("#")
            linked = (document.parent / file).resolve() if file else document
            here = f"{where(document, number)}: {target}"
            if not linked.exists():
                problems.append(f"{here}: no file {file}")
            elif anchor and linked.suffix == ".md" and anchor not in anchors(linked.read_text("utf-8")):
                problems.append(f"{here}: {linked.name} has no #{anchor}")
    assert not problems, "\n".join(problems)


# ------------------------------------------------------------------------------- outside documents


def test_no_code_cites_a_document_outside_the_repository() -> None:
    found = sorted((place, text) for text, places in cited(OUTSIDE, CODE_FOLDERS).items() for place in places)
    assert not found, "\n".join(
        f"{place}: {text!r} cites a document outside the repository; cite docs/rules.md (a rule id or "
        "its §), docs/scenarios.md, or say the reason in words"
        for place, text in found
    )


def test_the_outside_pattern_finds_each_form() -> None:
    for text in ("see FORMAT.md", "STYLE.md says", "read once (STYLE 5)", "(spec §1.7)", "Spec §1.4"):
        assert OUTSIDE.search(text), text
    assert not OUTSIDE.search("docs/rules.md §1.7, docs/scenarios.md, the style of STYLES")
