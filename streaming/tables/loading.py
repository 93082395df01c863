"""Load route and catalog files of any supported kind, validating them all before returning."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from streaming.errors import ConfigError
from streaming.rules.model import Instance
from streaming.tables.operations import RouteOperation, check_operations
from streaming.tables.tsql import load_route_script
from streaming.tables.validate import Source, check_instance_name, fail, route_subject, validate_instances
from streaming.tables.yaml_files import load_catalog_yaml, load_route_yaml

YAML_SUFFIXES = (".yaml", ".yml")
SQL_SUFFIXES = (".sql",)


def load_route_files(
    paths: Iterable[Path],
    *,
    now: datetime,
    default_scope: str | None = None,
    instance: str | None = None,
    default_instance: str | None = None,
) -> list[RouteOperation]:
    """Return the operations of every route file, in file order then statement order.

    `.yaml`/`.yml` files are route tables, `.sql` files CREATE/ALTER/DROP ROUTE scripts; `now` is
    the instant LIFETIME and lifetime_s count from (R6). A route created twice with no drop between
    is a duplicate, across files too. Every operation is in one instance's tables: the one its file
    names (a YAML entry's or file's `instance`, a script's `-- instance:` header), else `instance`
    (the `--instance` flag); the two must agree, and a route in no instance is an error. With
    `default_instance` instead, a route whose file names no instance is in that one's tables, and
    one whose file names another instance stays in it (a file may hold several instances' tables).
    """
    if instance is not None:
        check_instance_name(instance, Source("--instance"), "--instance", "instance")
    operations: list[RouteOperation] = []
    for path in paths:
        suffix = path.suffix.lower()
        if suffix in YAML_SUFFIXES:
            loaded = load_route_yaml(path, now=now, default_scope=default_scope)
        elif suffix in SQL_SUFFIXES:
            loaded = load_route_script(path, now=now, default_scope=default_scope)
        else:
            raise ConfigError(
                f"{path}: expected a .yaml, .yml or .sql route file, got {suffix or 'no suffix'!r}"
            )
        operations.extend(_in_instance(operation, instance, default_instance) for operation in loaded)
    check_operations(operations)
    return operations


def _in_instance(operation: RouteOperation, instance: str | None, default: str | None) -> RouteOperation:
    subject = route_subject(operation.scope, operation.name)
    if operation.instance is None:
        instance = instance or default
        if instance is None:
            fail(
                operation.source,
                subject,
                "names no instance: give `instance:` in the YAML file (an entry's or the file's), "
                "`-- instance: NAME` at the top of a T-SQL script, or --instance NAME",
                "instance",
            )
        return dataclasses.replace(operation, instance=instance)
    if instance is not None and operation.instance != instance:
        fail(
            operation.source,
            subject,
            f"the file puts it in instance {operation.instance!r}, --instance says {instance!r}",
            "instance",
        )
    return operation


def load_catalog_files(paths: Iterable[Path]) -> tuple[Instance, ...]:
    """Return the instances of every catalog YAML file, checked together (names unique, L4)."""
    loaded = []
    for path in paths:
        if path.suffix.lower() not in YAML_SUFFIXES:
            raise ConfigError(
                f"{path}: expected a .yaml or .yml catalog file, got {path.suffix or 'no suffix'!r}"
            )
        loaded.extend(load_catalog_yaml(path))
    return validate_instances(loaded)
