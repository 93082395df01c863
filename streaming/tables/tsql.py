"""Route tables written as T-SQL: the CREATE / ALTER / DROP ROUTE statements of SQL Server.

The subset read (docs/rules.md §1.1; CREATE ROUTE and ALTER ROUTE syntax):

    USE database                                  -- sets the scope of the statements after it
    GO                                            -- batch separator; the scope carries over
    CREATE ROUTE name [AUTHORIZATION owner]
        WITH [SERVICE_NAME = 'service',] [BROKER_INSTANCE = 'guid',] [LIFETIME = seconds,]
             ADDRESS = 'address' [, MIRROR_ADDRESS = 'address'] [;]
    ALTER ROUTE name WITH clause [, clause ...] [;]   -- only the clauses named change (R7)
    DROP ROUTE name [;]

Keywords are case-insensitive; names may be bracketed `[x]` or double-quoted; strings are '...'
or N'...' with '' for a quote; `--` and nested `/* */` comments are skipped. Without a USE, the
scope is the default scope (the `--scope` flag). A script is run on one SQL Server instance, so the
routes of a script are in one instance's tables: a header comment among the lines before the first
statement names it (`-- instance: i1`), else the `--instance` flag does. LIFETIME counts seconds
from `now` (R6). Any other statement is an error: a route script should say only what the router will do.

CREATE ROUTE's own rules are checked as SQL Server does: ADDRESS is required, a clause may appear
once, a mirror route names both SERVICE_NAME and BROKER_INSTANCE (R5a), no mirror on LOCAL or
TRANSPORT (R5b), a TRANSPORT route names neither (T3), a BCN route has no BROKER_INSTANCE (R9).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal, NoReturn

from streaming.errors import ConfigError
from streaming.rules.model import Route
from streaming.tables.operations import RouteOperation
from streaming.tables.validate import (
    Source,
    check_address,
    check_guid,
    check_instance_name,
    check_int,
    check_scope,
    check_service,
    check_sysname,
    check_tcp_address,
    fail,
    route_subject,
    validate_route,
)
from streaming.tables.yaml_files import read_text

TokenKind = Literal["word", "ident", "string", "number", "punct", "eof"]
LIFETIME_MAX = 2**31 - 1

CLAUSES = {
    "SERVICE_NAME": ("service", "string"),
    "BROKER_INSTANCE": ("broker_instance", "string"),
    "LIFETIME": ("expires_at", "number"),
    "ADDRESS": ("address", "string"),
    "MIRROR_ADDRESS": ("mirror_address", "string"),
}
"""Clause keyword -> (Route field, kind of literal it takes)."""


@dataclass(frozen=True)
class Token:
    """One lexical token: `text` is a keyword or name as written, a string's value, or a number."""

    kind: TokenKind
    text: str
    line: int

    def is_word(self, *words: str) -> bool:
        """Return whether this is one of the keywords `words` (upper case), in any case."""
        return self.kind == "word" and self.text.upper() in words

    def describe(self) -> str:
        """Return how an error message shows this token."""
        if self.kind == "eof":
            return "the end of the script"
        if self.kind == "string":
            return f"the string {self.text!r}"
        return repr(self.text)


def _is_word_char(ch: str) -> bool:
    return ch.isalnum() or ch in "_@#$"


def tokenize(text: str, file: str) -> list[Token]:
    """Split a T-SQL script into tokens, skipping whitespace and comments."""
    tokens: list[Token] = []
    i, line, n = 0, 1, len(text)

    def error(at_line: int, message: str) -> NoReturn:
        raise ConfigError(f"{Source(file, at_line)}: {message}")

    def quoted(start: int, close: str, what: str) -> tuple[str, int, int]:
        """Read from just after an opening quote to its `close`, a doubled `close` standing for one."""
        j, parts = start, []
        while True:
            k = text.find(close, j)
            if k < 0:
                error(line, f"unterminated {what}")
            parts.append(text[j:k])
            if text.startswith(close * 2, k):
                parts.append(close)
                j = k + 2
                continue
            value = "".join(parts)
            lines = text.count("\n", start, k)
            return value, k + 1, lines

    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
            i += 1
        elif ch.isspace():
            i += 1
        elif text.startswith("--", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            depth, j, start_line = 1, i + 2, line
            while depth:
                opening, closing = text.find("/*", j), text.find("*/", j)
                if closing < 0:
                    error(start_line, "unterminated /* comment")
                if 0 <= opening < closing:
                    depth, j = depth + 1, opening + 2
                else:
                    depth, j = depth - 1, closing + 2
            line += text.count("\n", i, j)
            i = j
        elif ch == "'" or (ch in "Nn" and text.startswith("'", i + 1)):
            start = i + (2 if ch != "'" else 1)
            value, i, lines = quoted(start, "'", "string")
            tokens.append(Token("string", value, line))
            line += lines
        elif ch == "[":
            value, i, lines = quoted(i + 1, "]", "[name]")
            tokens.append(Token("ident", value, line))
            line += lines
        elif ch == '"':
            value, i, lines = quoted(i + 1, '"', '"name"')
            tokens.append(Token("ident", value, line))
            line += lines
        elif ch.isdigit():
            j = i
            while j < n and text[j].isdigit():
                j += 1
            tokens.append(Token("number", text[i:j], line))
            i = j
        elif _is_word_char(ch):
            j = i
            while j < n and _is_word_char(text[j]):
                j += 1
            tokens.append(Token("word", text[i:j], line))
            i = j
        else:
            tokens.append(Token("punct", ch, line))
            i += 1
    tokens.append(Token("eof", "", line))
    return tokens


class _Parser:
    def __init__(self, tokens: list[Token], file: str, now: datetime, default_scope: str | None) -> None:
        self.tokens = tokens
        self.pos = 0
        self.file = file
        self.now = now
        self.scope = default_scope

    def peek(self) -> Token:
        return self.tokens[self.pos]

    def take(self) -> Token:
        token = self.tokens[self.pos]
        if token.kind != "eof":
            self.pos += 1
        return token

    def source(self, token: Token) -> Source:
        return Source(self.file, token.line)

    def expect_punct(self, char: str, after: str, subject: str) -> None:
        token = self.take()
        if token.kind != "punct" or token.text != char:
            fail(self.source(token), subject, f"expected '{char}' after {after}, got {token.describe()}")

    def name(self, what: str, subject: str) -> tuple[str, Token]:
        token = self.take()
        if token.kind not in ("word", "ident"):
            fail(self.source(token), subject, f"expected {what}, got {token.describe()}")
        following = self.peek()
        if following.kind == "punct" and following.text == ".":
            fail(self.source(following), subject, f"expected {what} in one part, got a qualified name")
        return token.text, token

    def parse(self) -> list[RouteOperation]:
        operations: list[RouteOperation] = []
        while True:
            token = self.peek()
            if token.kind == "eof":
                return operations
            if token.kind == "punct" and token.text == ";":
                self.take()
            elif token.is_word("GO"):
                self.take()
                if self.peek().kind == "number" and self.peek().line == token.line:
                    self.take()
            elif token.is_word("USE"):
                self.take()
                name, name_token = self.name("a database name after USE", "USE")
                self.scope = check_scope(name, self.source(name_token), "USE", "database")
            elif token.is_word("CREATE", "ALTER", "DROP") and self.tokens[self.pos + 1].is_word("ROUTE"):
                operations.append(self.route_statement())
            else:
                fail(
                    self.source(token),
                    "",
                    f"unsupported statement starting with {token.describe()}: a route script holds "
                    "USE, GO, CREATE ROUTE, ALTER ROUTE and DROP ROUTE",
                )

    def route_statement(self) -> RouteOperation:
        verb = self.take()
        self.take()  # ROUTE
        op = verb.text.lower()
        statement = f"{verb.text.upper()} ROUTE"
        name, name_token = self.name(f"a route name after {statement}", statement)
        source = self.source(verb)
        if self.scope is None:
            fail(
                source,
                route_subject(None, name),
                "no database for this route: put USE <database> before it or pass --scope",
                "scope",
            )
        subject = route_subject(self.scope, name)
        scope = self.scope
        check_sysname(name, self.source(name_token), subject, "name")
        if op == "drop":
            return RouteOperation("drop", scope, name, source, ddl=True)
        if op == "create" and self.peek().is_word("AUTHORIZATION"):
            self.take()
            self.name("an owner name after AUTHORIZATION", subject)
        with_token = self.take()
        if not with_token.is_word("WITH"):
            fail(
                self.source(with_token),
                subject,
                f"expected WITH after the route name, got {with_token.describe()}",
            )
        values = self.clauses(subject)
        if op == "alter":
            changes = tuple((field, value) for field, (value, _) in values.items())
            return RouteOperation("alter", scope, name, source, changes=changes, ddl=True)
        if "address" not in values:
            fail(source, subject, "CREATE ROUTE needs an ADDRESS clause", "address")

        def text(field: str) -> str | None:
            value = values.get(field, (None, source))[0]
            return value if isinstance(value, str) else None

        expires = values.get("expires_at", (None, source))[0]
        route = Route(
            scope=scope,
            name=name,
            address=str(text("address")),
            service=text("service"),
            broker_instance=text("broker_instance"),
            mirror_address=text("mirror_address"),
            expires_at=expires if isinstance(expires, datetime) else None,
        )
        clause_of = {field: clause for clause, (field, _) in CLAUSES.items()}

        def locate(field: str) -> tuple[Source, str]:
            return values.get(field, (None, source))[1], clause_of[field]

        validate_route(route, source, ddl=True, locate=locate)
        return RouteOperation("create", scope, name, source, route=route, ddl=True)

    def clauses(self, subject: str) -> dict[str, tuple[object, Source]]:
        """Read `KEYWORD = literal [, ...]`; return field -> (value, source of the clause)."""
        values: dict[str, tuple[object, Source]] = {}
        seen: dict[str, Source] = {}
        checks: dict[str, Callable[[Token, Source], object]] = {
            "SERVICE_NAME": lambda t, s: check_service(t.text, s, subject, "SERVICE_NAME"),
            "BROKER_INSTANCE": lambda t, s: check_guid(t.text, s, subject, "BROKER_INSTANCE"),
            "LIFETIME": lambda t, s: (
                self.now + timedelta(seconds=check_int(int(t.text), s, subject, "LIFETIME", 0, LIFETIME_MAX))
            ),
            "ADDRESS": lambda t, s: check_address(t.text, s, subject, "ADDRESS"),
            "MIRROR_ADDRESS": lambda t, s: check_tcp_address(t.text, s, subject, "MIRROR_ADDRESS"),
        }
        while True:
            keyword = self.take()
            source = self.source(keyword)
            clause = keyword.text.upper()
            if keyword.kind != "word" or clause not in CLAUSES:
                fail(source, subject, f"expected one of {', '.join(CLAUSES)}, got {keyword.describe()}")
            if clause in seen:
                fail(source, subject, f"clause given twice (first at line {seen[clause].line})", clause)
            seen[clause] = source
            self.expect_punct("=", clause, subject)
            literal = self.take()
            field, kind = CLAUSES[clause]
            if literal.kind != kind:
                wanted = "a number of seconds" if kind == "number" else "a string literal '...'"
                fail(self.source(literal), subject, f"expected {wanted}, got {literal.describe()}", clause)
            values[field] = (checks[clause](literal, self.source(literal)), source)
            following = self.peek()
            if following.kind == "punct" and following.text == ",":
                self.take()
                continue
            return values


_HEADER = re.compile(r"--\s*instance\s*:\s*(?P<name>\S+)\s*$", re.IGNORECASE)


def script_instance(text: str, file: str) -> str | None:
    """The instance a script's header names (`-- instance: NAME` before the first statement), or None."""
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        if not stripped.startswith("--"):
            return None
        found = _HEADER.match(stripped)
        if found:
            return check_instance_name(found["name"], Source(file, number), "header", "instance")
    return None


def parse_route_script(
    text: str,
    file: str,
    *,
    now: datetime,
    default_scope: str | None = None,
    default_instance: str | None = None,
) -> list[RouteOperation]:
    """Parse a T-SQL route script into its operations, in order (see the module docstring).

    The operations are in the instance the header names, else in `default_instance` (None: left to
    the caller).
    """
    if default_scope is not None:
        check_scope(default_scope, Source(file), "--scope", "scope")
    instance = script_instance(text, file) or default_instance
    return [
        dataclasses.replace(operation, instance=instance)
        for operation in _Parser(tokenize(text, file), file, now, default_scope).parse()
    ]


def load_route_script(path: Path, *, now: datetime, default_scope: str | None = None) -> list[RouteOperation]:
    """Read and parse a T-SQL route script file."""
    return parse_route_script(read_text(path), str(path), now=now, default_scope=default_scope)
