"""The manifest writer (`radixfleet.render.yamlout`): what it writes reads back as the data it
was given, for any JSON-like data; it writes what PyYAML's own dumper writes; and each note is
a comment directly above the key it explains."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from radixfleet.render.yamlout import ScalarDumper, to_yaml

# Strings that tempt a writer into plain style wrongly: YAML 1.1 and 1.2 booleans, numbers and
# nulls, indicators, comments, line breaks, unicode line separators, long keys.
TRICKY = [
    "", " ", "true", "yes", "No", "off", "null", "~", "1", "0o17", "0x1F", "1e3", ".inf", "-",
    "- x", "x: y", "a #b", "#c", "'", '"', "@x", "`x", "{a}", "[b]", "*ref", "&anchor", "!tag",
    "%x", "?", "a\nb", "a\n", "\n", "tab\there", " lead", "trail ", "line\u2028sep", "é", "💡",
    "k" * 200,
]  # fmt: skip
text = st.one_of(st.sampled_from(TRICKY), st.text(max_size=30))
scalar = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False), text,
)  # fmt: skip
documents = st.dictionaries(
    text,
    st.recursive(
        scalar,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
        max_leaves=20,
    ),
    max_size=6,
)


@settings(max_examples=200, deadline=None)
@given(documents)
def test_what_is_written_reads_back_as_the_same_data(doc: dict[str, Any]) -> None:
    assert yaml.safe_load(to_yaml(doc)) == doc


@settings(max_examples=200, deadline=None)
@given(documents.filter(lambda d: not _has_line_break(d)))
def test_it_writes_what_pyyaml_writes(doc: dict[str, Any]) -> None:
    # Multi-line strings are the one difference: one double-quoted line here, several there.
    # The dumper is libyaml's, quoting YAML 1.2's numbers too (`'0o17'`).
    expected = yaml.dump(doc, Dumper=ScalarDumper, sort_keys=False, width=4096,
                         allow_unicode=True)  # fmt: skip
    if "? " in expected:
        return  # PyYAML's complex keys (over 128 characters): written as quoted keys here
    assert to_yaml(doc) == ("{}\n" if not doc else expected)


def _has_line_break(value: Any) -> bool:
    if isinstance(value, str):
        return len(f"{value}.".splitlines()) > 1
    if isinstance(value, dict):
        return any(_has_line_break(k) or _has_line_break(v) for k, v in value.items())
    return isinstance(value, list) and any(_has_line_break(v) for v in value)


SPEC = {
    "spec": {
        "containers": [
            {"name": "sglang", "args": ["--port", "8080"], "startupProbe": {"periodSeconds": 10}},
            {"name": "sidecar"},
        ],
        "replicas": 2,
    }
}


@pytest.mark.parametrize(
    ("path", "above"),
    [
        pytest.param("spec", "spec:", id="top-level-key"),
        pytest.param("spec.replicas", "  replicas: 2", id="nested-key"),
        pytest.param("spec.containers[0].startupProbe", "    startupProbe:", id="in-a-list-item"),
        pytest.param("spec.containers[1].name", "  - name: sidecar", id="first-key-of-an-item"),
    ],
)
def test_a_note_is_a_comment_just_above_its_key(path: str, above: str) -> None:
    written = to_yaml(SPEC, notes={path: "why this value\nsecond line"}, header="Generated")
    lines = written.splitlines()
    assert lines[0] == "# Generated"
    at = lines.index(above)
    column = len(above) - len(above.lstrip(" -"))
    assert lines[at - 2 : at] == [" " * column + "# why this value", " " * column + "# second line"]
    assert yaml.safe_load(written) == SPEC


def test_a_note_for_a_missing_key_is_an_error() -> None:
    with pytest.raises(KeyError, match=r"spec\.nope"):
        to_yaml(SPEC, notes={"spec.nope": "lost"})
