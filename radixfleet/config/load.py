"""Read a catalog file into typed objects, or fail with every problem it has."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from radixfleet.bounded_yaml import YamlBoundsError, check_bounds
from radixfleet.config.catalog import Catalog
from radixfleet.config.crosscheck import check_catalog
from radixfleet.config.errors import ConfigError, Problem, format_location, not_utf8

# Far above any real catalog (10,000 models are about 5 MB), far below what hurts: a catalog
# path that is a device or a runaway file is refused after this much, not read to the end.
MAX_CATALOG_BYTES = 32 * 1024**2


def load_catalog(path: Path) -> Catalog:
    """Load and fully validate a catalog file; raise `ConfigError` listing every problem."""
    return parse_catalog(read_bounded(path, limit=MAX_CATALOG_BYTES), source=str(path))


def read_bounded(path: Path, *, limit: int) -> str:
    """A UTF-8 text file of at most `limit` bytes, or `ConfigError` saying why not."""
    try:
        with path.open("rb") as file:
            raw = file.read(limit + 1)
    except OSError as exc:
        raise ConfigError([Problem(str(path), "", f"cannot read: {exc.strerror}")]) from exc
    if len(raw) > limit:
        message = f"larger than {limit // 1024**2} MiB: not a file radixfleet reads"
        raise ConfigError([Problem(str(path), "", message)])
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError([Problem(str(path), "", not_utf8(exc))]) from exc


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
        data = _load(text)
    except DuplicateKeyError as exc:
        raise ConfigError([Problem(source, exc.where, str(exc))]) from exc
    except YamlBoundsError as exc:
        raise ConfigError([Problem(source, f"line {exc.line}", exc.reason)]) from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else ""
        raise ConfigError([Problem(source, where, f"not valid YAML: {exc}")]) from exc
    if not isinstance(data, dict):
        raise ConfigError([Problem(source, "", "must be a mapping with regions, tenants, models")])
    return data


def _load(text: str) -> Any:
    """Safe loaders only: they build plain data, and only from text within the bounds."""
    check_bounds(text)
    if not yaml.__with_libyaml__:
        return yaml.load(text, Loader=UniqueKeyLoader)
    try:
        return yaml.load(text, Loader=FastUniqueKeyLoader)
    except yaml.YAMLError:
        return yaml.load(text, Loader=UniqueKeyLoader)  # the same error, better located


_STR_TAG = "tag:yaml.org,2002:str"


class DuplicateKeyError(yaml.YAMLError):
    """A mapping names one key twice; YAML loaders keep the last silently, we refuse."""

    def __init__(self, key: object, line: int) -> None:
        super().__init__(f"duplicate key {key!r}: a second value would silently replace the first")
        self.where = f"line {line}"


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that repeats a key."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        _refuse_repeated_keys(self, node, deep=deep)
        return super().construct_mapping(node, deep=deep)


class FastUniqueKeyLoader(yaml.CSafeLoader):
    """The same on libyaml's parser: ten times faster on a 10,000-model catalog. Its errors
    are located less helpfully, so a document it refuses is parsed again by the one above.

    Plain data (strings, numbers, lists, mappings without merge keys) is built by `_Builder`,
    which skips PyYAML's per-node bookkeeping: building took 2 of the 2.7 s a 10,000-model
    catalog took to load. Anything else, and a document nested past Python's recursion limit,
    goes through PyYAML's own constructor, as before."""

    def construct_document(self, node: yaml.Node) -> Any:
        try:
            return _Builder(self).build(node)
        except RecursionError:
            return super().construct_document(node)

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        _refuse_repeated_keys(self, node, deep=deep)
        return dict(super().construct_mapping(node, deep=deep))


_SEQ_TAG = "tag:yaml.org,2002:seq"
_MAP_TAG = "tag:yaml.org,2002:map"
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _Builder:
    """Python values from a composed node tree, each node built once (an alias shares the
    value, as with PyYAML, so an alias bomb stays small), refusing repeated keys."""

    def __init__(self, loader: FastUniqueKeyLoader) -> None:
        self.loader = loader
        self.built: dict[int, Any] = {}  # id(node) -> value; the nodes outlive the build

    def build(self, node: yaml.Node) -> Any:
        if id(node) in self.built:
            return self.built[id(node)]
        if isinstance(node, yaml.ScalarNode):
            value = node.value if node.tag == _STR_TAG else self._scalar(node)
        elif isinstance(node, yaml.SequenceNode) and node.tag == _SEQ_TAG:
            value = self.built[id(node)] = []  # before the items: a list may contain itself
            value.extend(self.build(item) for item in node.value)
        elif isinstance(node, yaml.MappingNode) and node.tag == _MAP_TAG and not _merges(node):
            value = self.built[id(node)] = {}
            self._fill(value, node)
        else:
            value = self.loader.construct_object(node, deep=True)
        self.built[id(node)] = value
        return value

    def _scalar(self, node: yaml.ScalarNode) -> Any:
        construct = self.loader.yaml_constructors.get(node.tag)
        if construct is None:
            return self.loader.construct_object(node)  # its error names the unknown tag
        return construct(self.loader, node)

    def _fill(self, mapping: dict[Any, Any], node: yaml.MappingNode) -> None:
        for key_node, value_node in node.value:
            key = self.build(key_node)
            if _seen_before(key, mapping, node, key_node):
                raise DuplicateKeyError(key, key_node.start_mark.line + 1)
            mapping[key] = self.build(value_node)


def _merges(node: yaml.MappingNode) -> bool:
    return any(key.tag == _MERGE_TAG for key, _ in node.value)


def _refuse_repeated_keys(loader: yaml.constructor.SafeConstructor, node: yaml.MappingNode,
                          *, deep: bool) -> None:  # fmt: skip
    seen: set[object] = set()
    for key_node, _ in node.value:
        if key_node.tag == _MERGE_TAG:
            continue  # `<<: *defaults`: keys written beside it override the merged ones
        # A string key is its node's text; only other keys (1 and 01 are one int) need building.
        is_text = isinstance(key_node, yaml.ScalarNode) and key_node.tag == _STR_TAG
        key = key_node.value if is_text else loader.construct_object(key_node, deep=deep)
        if _seen_before(key, seen, node, key_node):
            raise DuplicateKeyError(key, key_node.start_mark.line + 1)
        seen.add(key)


def _seen_before(key: object, seen: set[object] | dict[Any, Any], node: yaml.MappingNode,
                 key_node: yaml.Node) -> bool:  # fmt: skip
    """Whether `key` is already in `seen`; a list or mapping as a key is PyYAML's own error."""
    try:
        return key in seen
    except TypeError:
        raise yaml.constructor.ConstructorError(
            "while constructing a mapping", node.start_mark,
            "found unhashable key", key_node.start_mark) from None  # fmt: skip


def pydantic_problems(
    exc: ValidationError, *, source: str, secret: frozenset[str] = frozenset()
) -> list[Problem]:
    """One `Problem` per pydantic error, located like `models[2].tensor_parallel`. The value
    given is quoted, except under a top-level field in `secret`: a key's value in an error
    would end in a terminal, a CI log or an issue."""
    problems = []
    for error in exc.errors():
        loc = format_location([p for p in error["loc"] if not str(p).startswith("function-")])
        given = error.get("input")
        message = error["msg"].removeprefix("Value error, ")
        hidden = bool(error["loc"]) and str(error["loc"][0]) in secret
        scalar = not isinstance(given, dict | list)
        plain = error["type"] not in ("missing", "value_error") and scalar
        if error["type"] == "extra_forbidden":
            message = "unknown field"
        elif plain and not hidden:
            message = f"{given!r}: {message}"
        problems.append(Problem(source, loc, message))
    return problems
