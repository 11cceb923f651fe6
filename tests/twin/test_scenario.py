"""Scenario files: a good one loads; a bad one is reported whole, located, and never runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from radixfleet.cli import app
from radixfleet.config.errors import ConfigError
from radixfleet.twin.load import load_scenario, parse_scenario
from tests.twin.conftest import SMALL

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "scenarios"


def _broken(**changes: object) -> str:
    data = yaml.safe_load(SMALL)
    for dotted, value in changes.items():
        target = data
        *path, last = dotted.split("__")
        for part in path:
            target = target[int(part)] if part.isdigit() else target[part]
        target[int(last) if last.isdigit() else last] = value
    return yaml.safe_dump(data)


def test_small_scenario_loads(small_scenario: Path) -> None:
    scenario = load_scenario(small_scenario)
    assert [r.name for r in scenario.regions] == ["us-east", "eu-west"]
    assert scenario.policies[1].baseline


@pytest.mark.parametrize("path", sorted(BENCH.glob("*.yaml")), ids=lambda p: p.stem)
def test_bench_scenarios_load(path: Path) -> None:
    assert load_scenario(path).name == path.stem


@pytest.mark.parametrize(
    ("changes", "location", "words"),
    [
        ({"tenants__0__model": "nope"}, "tenants[0].model", "unknown model"),
        ({"faults__0__region": "mars"}, "faults[0].region", "unknown region"),
        ({"faults__1__at_s": 500}, "faults[1].at_s", "not before the end"),
        ({"policies__0__routing": "psychic"}, "policies[0].routing", "unknown routing policy"),
        (
            {"policies__1__autoscale": "no.such:thing"},
            "policies[1].autoscale",
            "cannot be imported",
        ),
        ({"models__0__pool": "a100"}, "models[0].pool", "has no GPU pool"),
        ({"models__0__profile": "tpu-v9"}, "models[0].profile", "not a built-in profile"),
        ({"models__0__min_replicas": 9}, "models[0].min_replicas", "above max_replicas"),
        ({"duration_s": -1}, "duration_s", "greater than 0"),
        ({"workload__sources__0__kind": "telepathy"}, "workload.sources[0]", ""),
        ({"regions__0__colour": "blue"}, "regions[0].colour", "unknown field"),
    ],
    ids=lambda v: str(v) if isinstance(v, str) else None,
)
def test_bad_scenarios_name_file_entry_and_field(
    changes: dict[str, object], location: str, words: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_scenario(_broken(**changes), source="bad.yaml")
    messages = [str(p) for p in caught.value.problems]
    assert any(m.startswith(f"bad.yaml: {location}") and words in m for m in messages), messages


def test_every_problem_is_reported_at_once() -> None:
    text = _broken(tenants__0__model="nope", faults__0__region="mars")
    with pytest.raises(ConfigError) as caught:
        parse_scenario(text, source="bad.yaml")
    assert len(caught.value.problems) == 2


def test_not_yaml_and_not_a_mapping() -> None:
    with pytest.raises(ConfigError, match="not valid YAML"):
        parse_scenario("regions: [", source="bad.yaml")
    with pytest.raises(ConfigError, match="must be a mapping"):
        parse_scenario("- 1", source="bad.yaml")


def test_cli_refuses_a_bad_scenario_and_writes_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(_broken(tenants__0__model="nope"))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["twin", "run", "--scenario", str(bad), "--out", str(out)])
    assert result.exit_code == 2
    assert "tenants[0].model: unknown model 'nope'" in result.output
    assert not out.exists()
