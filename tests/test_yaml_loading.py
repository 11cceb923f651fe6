"""The catalog's fast YAML loader builds exactly what PyYAML's safe loader builds.

`FastUniqueKeyLoader` builds plain data itself (radixfleet/config/load.py: a 10,000-model
catalog loads in a third of the time); these tests hold it to PyYAML's results on the YAML a
catalog may contain, on the corners of the language, and on random data (Hypothesis).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from radixfleet.config.errors import ConfigError
from radixfleet.config.load import (
    DuplicateKeyError,
    FastUniqueKeyLoader,
    UniqueKeyLoader,
    parse_catalog,
)

CORNERS = {
    "scalars": "a: 1\nb: 0x1f\nc: 0o17\nd: 1_000\ne: .inf\nf: -.nan\ng: ~\nh: yes\ni: '1'\n",
    "timestamps-and-binary": "t: 2026-11-26\nu: 2026-11-26T14:00:00Z\nb: !!binary aGVsbG8=\n",
    "non-text-keys": "2: two\ntrue: yes\n~: null\n2.5: float\n",
    "anchors-and-aliases": "base: &b {x: 1, y: [1, 2]}\ncopy: *b\nlist: [*b, *b]\n",
    "merge-keys": "base: &b {x: 1, y: 2}\nmerged:\n  <<: *b\n  y: 3\n",
    "merge-list": "a: &a {x: 1}\nb: &b {y: 2}\nc:\n  <<: [*a, *b]\n  z: 3\n",
    "set-and-omap": "s: !!set {a, b}\no: !!omap [{a: 1}, {b: 2}]\n",
    "empty-values": "a:\nb: []\nc: {}\nd: ''\n",
    "block-scalars": "a: |\n  line one\n  line two\nb: >\n  folded\n  text\n",
    "explicit-tags": "a: !!str 12\nb: !!int '7'\nc: !!float 1\n",
}


def _same(left: Any, right: Any) -> bool:
    """Equal, counting NaN equal to NaN (`-.nan` loads as a NaN either way)."""
    if isinstance(left, float) and isinstance(right, float) and math.isnan(left):
        return math.isnan(right)
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_same(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(_same, left, right))
    return type(left) is type(right) and left == right


@pytest.mark.parametrize("loader", [FastUniqueKeyLoader, UniqueKeyLoader], ids=["fast", "slow"])
@pytest.mark.parametrize("text", CORNERS.values(), ids=CORNERS.keys())
def test_the_fast_loader_builds_what_the_safe_loader_builds(text: str, loader: Any) -> None:
    # The slow loader is the fallback that locates errors; both refused merge keys before.
    fast = yaml.load(text, Loader=loader)
    assert _same(fast, yaml.load(text, Loader=yaml.CSafeLoader))  # same parser, PyYAML's build


def test_a_document_nested_past_the_recursion_limit_still_loads() -> None:
    # The builder recurses; past Python's limit the document is built by PyYAML's own
    # constructor, which does not.
    loaded = yaml.load("models: " + "[" * 3000 + "]" * 3000 + "\n", Loader=FastUniqueKeyLoader)
    depth, inner = 0, loaded["models"]
    while inner:
        depth, inner = depth + 1, inner[0]
    assert depth == 2999


def test_an_alias_is_one_shared_value_so_an_alias_bomb_stays_small() -> None:
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    loaded = yaml.load("\n".join(levels) + "\n", Loader=FastUniqueKeyLoader)
    assert loaded["a8"][0] is loaded["a8"][1] is loaded["a7"]  # 9**9 items if copied


def test_a_list_that_contains_itself_is_built() -> None:
    loaded = yaml.load("a: &a [1, *a]\n", Loader=FastUniqueKeyLoader)
    assert loaded["a"][1] is loaded["a"]


@pytest.mark.parametrize(
    ("text", "line"),
    [
        pytest.param("a: 1\nb: 2\na: 3\n", 3, id="text-key"),
        pytest.param("1: a\n01: b\n", 2, id="one-int-written-twice"),
        pytest.param("x:\n  y: 1\n  z: 2\n  y: 3\n", 4, id="nested"),
    ],
)
def test_a_repeated_key_is_refused_with_its_line(text: str, line: int) -> None:
    with pytest.raises(DuplicateKeyError) as caught:
        yaml.load(text, Loader=FastUniqueKeyLoader)
    assert caught.value.where == f"line {line}"


@pytest.mark.parametrize("loader", [FastUniqueKeyLoader, UniqueKeyLoader], ids=["fast", "slow"])
def test_an_unhashable_key_is_a_yaml_error_not_a_type_error(loader: Any) -> None:
    with pytest.raises(yaml.constructor.ConstructorError, match="unhashable key"):
        yaml.load("? [a, b]\n: c\n", Loader=loader)


def test_an_unhashable_key_in_a_catalog_is_one_clear_problem() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_catalog("regions: []\n? [a, b]\n: c\n", source="catalog.yaml")
    assert str(caught.value.problems[0]).startswith("catalog.yaml: line 2: not valid YAML")


_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
_DATA = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=300)
@given(data=_DATA)
def test_random_data_round_trips_as_with_the_safe_loader(data: Any) -> None:
    text = yaml.safe_dump({"data": data})
    assert _same(yaml.load(text, Loader=FastUniqueKeyLoader), yaml.load(text, yaml.CSafeLoader))
