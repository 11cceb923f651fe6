"""YAML that nests or expands past radixfleet's bounds is refused with its file and line, by
every command that reads YAML from a user, before anything is built from it.

Before `radixfleet/bounded_yaml.py`, 50,000 nested `[` crashed `render` and `validate` (libyaml
recursing in C: a segfault, exit 139) and a 354-byte alias bomb made `validate` print 80 MB.
The commands run as processes here, so a crash is a failed test, not a lost worker.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from radixfleet.bounded_yaml import MAX_DEPTH, YamlBoundsError, check_bounds
from radixfleet.cli import EXIT_BAD_CONFIG, EXIT_PROBLEMS
from radixfleet.config.errors import ConfigError
from radixfleet.config.load import parse_catalog
from radixfleet.profile import ProfileError, load_profile
from radixfleet.twin.load import parse_scenario

REPO = Path(__file__).resolve().parents[1]
RADIXFLEET = Path(sys.executable).parent / "radixfleet"
EXIT = {"validate": EXIT_PROBLEMS, "render": EXIT_BAD_CONFIG}


def nested(depth: int) -> str:
    return "regions: " + "[" * depth + "]" * depth + "\n"


def alias_bomb(levels: int = 9) -> str:
    lines = ["a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + f"\nregions: *a{levels - 1}\n"


ATTACKS = {"50000-nested-brackets": nested(50_000), "alias-bomb": alias_bomb()}
LINE = {"50000-nested-brackets": 1, "alias-bomb": 6}  # where the bound is passed
EXPECTED = {"50000-nested-brackets": "nested deeper than 100 levels", "alias-bomb": "alias bomb"}


@pytest.mark.parametrize("command", ["validate", "render"])
@pytest.mark.parametrize("attack", ATTACKS, ids=ATTACKS.keys())
def test_a_command_refuses_the_file_in_one_short_message_and_writes_nothing(
    command: str, attack: str, tmp_path: Path
) -> None:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(ATTACKS[attack])
    out = tmp_path / "out"
    argv = (
        [str(catalog)] if command == "validate" else ["--catalog", str(catalog), "--out", str(out)]
    )
    result = subprocess.run(
        [str(RADIXFLEET), command, *argv], capture_output=True, text=True, timeout=120
    )
    said = result.stdout + result.stderr
    assert result.returncode == EXIT[command], said[-2000:]  # 139 was the segfault
    assert EXPECTED[attack] in said and str(catalog) in said
    assert len(said) < 2000 and "Traceback" not in said
    assert not out.exists()


READERS: dict[str, Callable[[str, Path], Any]] = {
    "catalog": lambda text, _: parse_catalog(text, source="catalog.yaml"),
    "scenario": lambda text, _: parse_scenario(text, source="scenario.yaml"),
    "profile": lambda text, folder: load_profile(_written(folder / "profile.yaml", text)),
}


def _written(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("reader", READERS, ids=READERS.keys())
@pytest.mark.parametrize("attack", ATTACKS, ids=ATTACKS.keys())
def test_every_reader_refuses_it_as_its_own_clear_error(
    reader: str, attack: str, tmp_path: Path
) -> None:
    with pytest.raises((ConfigError, ProfileError)) as caught:
        READERS[reader](ATTACKS[attack], tmp_path)
    assert EXPECTED[attack] in str(caught.value)
    assert f"line {LINE[attack]}" in str(caught.value)


def test_the_depth_bound_is_exact() -> None:
    check_bounds("[" * MAX_DEPTH + "]" * MAX_DEPTH)
    with pytest.raises(YamlBoundsError) as caught:
        check_bounds("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))
    assert caught.value.line == 1


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        pytest.param(alias_bomb(levels=6), True, id="9**6-strings-from-a-small-file"),
        pytest.param(alias_bomb(levels=4), False, id="9**4-strings-under-the-floor"),
        pytest.param(
            "defaults: &d {gpu: h100, replicas: 2, tensor_parallel: 1}\n"
            + "".join(f"m{i}: {{<<: *d, name: m{i}}}\n" for i in range(20_000)),
            False,
            id="a-merge-key-per-model-in-a-large-catalog",
        ),
    ],
)
def test_aliases_are_bounded_by_what_the_file_writes(text: str, refused: bool) -> None:
    if refused:
        with pytest.raises(YamlBoundsError, match="alias bomb"):
            check_bounds(text)
    else:
        check_bounds(text)


def test_a_syntax_error_is_left_to_the_loader_that_locates_it() -> None:
    check_bounds("a: [1, 2\nb: }\n")
    with pytest.raises(ConfigError, match="line 2: not valid YAML"):
        parse_catalog("a: [1, 2\nb: }\n", source="catalog.yaml")


_DATA = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=40,
)


@given(data=_DATA)
def test_plain_data_within_the_depth_bound_is_never_refused(data: Any) -> None:
    check_bounds(yaml.safe_dump({"data": data}))


def test_every_yaml_file_radixfleet_ships_or_reads_is_within_the_bounds() -> None:
    folders = [
        "runtimes",
        "inferenceservices",
        "deploy",
        "radixfleet/controllers",
        "radixfleet/kit",
        "tests/data",
    ]
    files = [f for folder in folders for f in sorted((REPO / folder).rglob("*.yaml"))]
    files += sorted((REPO.parent / "shared" / "schemas").rglob("*.yaml"))
    assert len(files) > 50
    for file in files:
        check_bounds(file.read_text(encoding="utf-8"))
