"""Read a catalog file into typed objects, or fail with every problem it has."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from radixfleet.config.catalog import Catalog
from radixfleet.config.crosscheck import check_catalog
from radixfleet.config.errors import ConfigError, Problem, format_location


def load_catalog(path: Path) -> Catalog:
    """Load and fully validate a catalog file; raise `ConfigError` listing every problem."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([Problem(str(path), "", f"cannot read: {exc.strerror}")]) from exc
    return parse_catalog(text, source=str(path))


def parse_catalog(text: str, *, source: str) -> Catalog:
    """Validate catalog YAML text; `source` names the file in every problem."""
    data = _parse_yaml(text, source=source)
    try:
        catalog = Catalog.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(pydantic_problems(exc, source=source)) from exc
    findings = check_catalog(catalog)
    if findings:
        raise ConfigError([Problem(source, loc, msg) for loc, msg in findings])
    return catalog


def _parse_yaml(text: str, *, source: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else ""
        raise ConfigError([Problem(source, where, f"not valid YAML: {exc}")]) from exc
    if not isinstance(data, dict):
        raise ConfigError([Problem(source, "", "must be a mapping with regions, tenants, models")])
    return data


def pydantic_problems(exc: ValidationError, *, source: str) -> list[Problem]:
    """One `Problem` per pydantic error, located like `models[2].tensor_parallel`."""
    problems = []
    for error in exc.errors():
        loc = format_location([p for p in error["loc"] if not str(p).startswith("function-")])
        given = error.get("input")
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "unknown field"
        elif error["type"] not in ("missing", "value_error") and not isinstance(given, dict | list):
            message = f"{given!r}: {message}"
        problems.append(Problem(source, loc, message))
    return problems
