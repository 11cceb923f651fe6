"""The manifest validator catches each kind of error a cluster or SGLang would reject."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from radixfleet.cli import app
from radixfleet.sglang_flags import check_args
from radixfleet.validate import iter_findings, validate_documents, validate_paths
from tests.audit_cases import CASES_DIR, AuditCase, load_cases

REPO = Path(__file__).resolve().parent.parent
ISVC = REPO / "inferenceservices" / "team-search" / "llama-3-1-8b.yaml"
# The catalog's model with a host KV tier (SGLang's HiCache flags).
TIERED = REPO / "inferenceservices" / "team-search" / "llama-3-1-70b.yaml"
RUNTIME = REPO / "runtimes" / "sglang.yaml"
PEERING = REPO / "deploy" / "operator" / "peering.yaml"
POD_MONITOR = REPO / "deploy" / "monitoring" / "radixfleet-routers.yaml"

Mutation = Callable[[dict[str, Any]], None]


def load(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(path.read_text())
    return doc


def predictor(doc: dict[str, Any]) -> dict[str, Any]:
    p: dict[str, Any] = doc["spec"]["predictor"]
    return p


def set_flag(flag: str, value: str) -> Mutation:
    """A mutation that gives `flag`, which the predictor's args hold, another value."""

    def mutate(doc: dict[str, Any]) -> None:
        args: list[str] = predictor(doc)["model"]["args"]
        args[args.index(flag) + 1] = value

    return mutate


CASES: list[Any] = [
    pytest.param(
        ISVC,
        lambda d: predictor(d)["model"].update(gpus=1),
        "spec.predictor.model: unknown field 'gpus'",
        id="unknown-field",
    ),
    pytest.param(
        ISVC,
        lambda d: predictor(d).update(minReplicas="zero"),
        "spec.predictor.minReplicas: 'zero' is not of type 'integer'",
        id="wrong-type",
    ),
    pytest.param(
        ISVC,
        lambda d: predictor(d).update(scaleMetric="gpu"),
        "spec.predictor.scaleMetric: 'gpu' is not one of",
        id="bad-enum",
    ),
    pytest.param(
        ISVC,
        lambda d: predictor(d)["model"]["args"].append("--radix-cache-size"),
        "spec.predictor.model.args: unknown sglang flag --radix-cache-size",
        id="bad-flag",
    ),
    # Kopf's peering CRD declares only `status`; the object's own root fields are still known.
    pytest.param(
        PEERING, lambda d: d.update(spec={"x": 1}), ": unknown field 'spec'", id="peering"
    ),
    pytest.param(
        POD_MONITOR,
        lambda d: d["spec"]["podMetricsEndpoints"][0].update(scrapeInterval="15s"),
        "spec.podMetricsEndpoints[0]: unknown field 'scrapeInterval'",
        id="pod-monitor",
    ),
    pytest.param(
        ISVC,
        lambda d: predictor(d)["model"]["args"].extend(["--tp-size", "four"]),
        "spec.predictor.model.args: --tp-size 'four': not a valid int",
        id="bad-flag-value",
    ),
    pytest.param(
        RUNTIME,
        lambda d: d["spec"]["containers"][0]["args"].extend(["--schedule-policy", "fifo"]),
        "spec.containers[0].args: --schedule-policy 'fifo': not one of",
        id="bad-flag-choice",
    ),
    pytest.param(
        ISVC,
        lambda d: d["metadata"].update(name="Llama_8B"),
        "metadata.name: 'Llama_8B' is not a valid DNS-1035 label",
        id="bad-name",
    ),
    pytest.param(
        ISVC,
        lambda d: d["metadata"].update(name="8b-llama"),
        "metadata.name: '8b-llama' is not a valid DNS-1035 label",
        id="isvc-name-starts-with-digit",
    ),
    pytest.param(
        RUNTIME,
        lambda d: d["spec"]["containers"][0].update(ports=[{"containerPort": "http"}]),
        "spec.containers[0].ports[0].containerPort: 'http' is not of type 'integer'",
        id="runtime-wrong-type",
    ),
    pytest.param(
        ISVC,
        lambda d: predictor(d).update(maxReplicas=2**70),
        f"spec.predictor.maxReplicas: {2**70} is greater than the maximum of 2147483647",
        id="replicas-beyond-int32",
    ),
    pytest.param(
        TIERED,
        set_flag("--hicache-write-policy", "write_around"),
        "spec.predictor.model.args: --hicache-write-policy 'write_around': not one of "
        "write_back, write_through, write_through_selective",
        id="hicache-write-policy-sglang-does-not-know",
    ),
    pytest.param(
        TIERED,
        set_flag("--hicache-size", "137.5"),
        "spec.predictor.model.args: --hicache-size '137.5': not a valid int",
        id="hicache-size-not-an-int",
    ),
    pytest.param(
        TIERED,
        set_flag("--hicache-size", "512Gi"),
        "spec.predictor.model.args: --hicache-size '512Gi': not a valid int",
        id="hicache-size-as-a-quantity",
    ),
    # 137 GB on each of 4 ranks: 548 GB of host pools, which 600Gi less sglang's 10 GiB hold,
    # but 500Gi does not; 600 GB a rank is more than any H100 node has.
    pytest.param(
        TIERED,
        lambda d: predictor(d)["model"]["resources"]["limits"].update(memory="500Gi"),
        "spec.predictor.model.resources.limits.memory: 500Gi cannot hold the container's "
        "HiCache host tier (548 GB) and the 10 GiB sglang keeps free beside it",
        id="hicache-host-tier-past-the-containers-memory",
    ),
    pytest.param(
        TIERED,
        set_flag("--hicache-size", "600"),
        "spec.predictor.model.args: a HiCache host tier of 2400 GB is larger than the memory of "
        "any h100 node (2048 GiB at most)",
        id="hicache-host-tier-past-any-nodes-memory",
    ),
    # A hand-written manifest could widen the tenant's S3 grant the catalog refuses to widen.
    pytest.param(
        ISVC,
        lambda d: predictor(d)["model"].update(storageUri="s3://radixfleet-models/*"),
        "spec.predictor.model.storageUri: 's3://radixfleet-models/*': no wildcards",
        id="storage-wildcard",
    ),
    pytest.param(
        ISVC,
        lambda d: predictor(d)["model"].update(storageUri="s3://radixfleet-models/"),
        "spec.predictor.model.storageUri: 's3://radixfleet-models/' must name a folder",
        id="storage-bucket-root",
    ),
    pytest.param(
        ISVC,
        lambda d: predictor(d)["model"].update(storageUri="s3://radixfleet-models/a/../b"),
        "spec.predictor.model.storageUri: 's3://radixfleet-models/a/../b' must name a folder",
        id="storage-dot-dot",
    ),
]


@pytest.mark.parametrize(("path", "mutate", "expected"), CASES)
def test_validator_catches(path: Path, mutate: Mutation, expected: str) -> None:
    doc = copy.deepcopy(load(path))
    assert validate_documents([doc], source=path.name) == [], "the committed manifest is valid"
    mutate(doc)
    messages = [f"{f.location}: {f.message}" for f in validate_documents([doc], source=path.name)]
    assert any(m.startswith(expected) for m in messages), messages


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        pytest.param(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}, "spec": {"x": 1}},
            "spec: unknown field 'x'",
            id="core-unknown-field",
        ),
        pytest.param(
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "Team_A"}},
            "metadata.name: 'Team_A' is not a valid DNS-1123 label",
            id="core-bad-name",
        ),
        pytest.param(
            {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}},
            ": no schema known for example.com/v1 Widget",
            id="unknown-kind",
        ),
        pytest.param({"a": 1}, ": not a Kubernetes object", id="not-an-object"),
    ],
)
def test_validator_on_other_objects(doc: dict[str, Any], expected: str) -> None:
    messages = [f"{f.location}: {f.message}" for f in validate_documents([doc], source="x.yaml")]
    assert any(m.startswith(expected) for m in messages), messages


def _shipped_folders() -> list[Path]:
    """Every folder of manifests the project ships: kustomize bases and catalog output."""
    deploy = sorted(p for p in (REPO / "deploy").iterdir() if p.is_dir())
    teams = sorted(p for p in (REPO / "inferenceservices").glob("team-*") if p.is_dir())
    return [*deploy, REPO / "runtimes", REPO / "inferenceservices", *teams]


@pytest.mark.parametrize(
    "folders",
    [pytest.param([f], id=str(f.relative_to(REPO))) for f in _shipped_folders()]
    # Together, as a cluster holds them: the InferenceServices judged beside their runtimes.
    + [pytest.param(_shipped_folders(), id="all-together")],
)
def test_shipped_manifests_have_no_problems(folders: list[Path]) -> None:
    assert [str(f) for f in validate_paths(folders)] == []


TENANT_SPEC = {"namespaces": ["team-a"]}


@pytest.mark.parametrize(
    ("metadata", "problems"),
    [
        pytest.param({"name": "a", "labels": {"t": "a"}, "annotations": {"x": "y"}}, [], id="open"),
        # The Tenant CRD narrows the name to 63 characters (it is a label value).
        pytest.param({"name": "a" * 64}, [f"metadata.name: '{'a' * 64}' is too long"], id="name"),
    ],
)
def test_custom_object_metadata_is_object_meta(
    metadata: dict[str, Any], problems: list[str]
) -> None:
    """A CRD's schema may narrow metadata.name, but labels and annotations are always allowed,
    as the API server allows them (a closed `metadata` refused every label)."""
    doc = {"apiVersion": "radixfleet.io/v1alpha1", "kind": "Tenant", "metadata": metadata}
    found = validate_documents([doc | {"spec": TENANT_SPEC}], source="x.yaml")
    messages = [f"{f.location}: {f.message}" for f in found]
    assert all(p in messages for p in problems), messages
    assert bool(messages) == bool(problems), messages


@pytest.mark.parametrize(
    ("args", "problems"),
    [
        pytest.param(["--enable-metrics", "--port", "8080"], [], id="valid"),
        pytest.param(["--lora-paths", "a=/x", "b=/y", "--enable-lora"], [], id="nargs-star"),
        pytest.param(["--served-model-name", "{{.Name}}"], [], id="kserve-template"),
        pytest.param(["--context-length", "128k"], [], id="human-readable-int"),
        pytest.param(
            ["--port={{.Name}}"],
            ["--port '{{.Name}}': a template cannot be a int"],
            id="template-in-int",
        ),
        pytest.param(["--tp-size"], ["--tp-size needs a value"], id="missing-value"),
        pytest.param(
            ["--enable-metrics=yes"],
            ["--enable-metrics 'yes': takes no value"],
            id="value-on-switch",
        ),
        pytest.param(
            ["8080"],
            ["'8080' is not a flag (values follow the flag they belong to)"],
            id="stray-value",
        ),
        pytest.param(
            ["--mem-fraction-static", "most"],
            ["--mem-fraction-static 'most': not a valid float"],
            id="bad-float",
        ),
        pytest.param(
            ["--api-key", "-Zq3x"],
            [
                "--api-key needs a value",
                "'-Zq3x' is not a flag (values follow the flag they belong to)",
            ],
            id="dashed-value-reads-as-a-flag",
        ),
        pytest.param(["--random-seed", "-1"], [], id="negative-number-is-a-value"),
        pytest.param(["--api-key=-Zq3x"], [], id="dashed-value-attached"),
        pytest.param(
            ["--api-key", "$(DATA_PLANE_KEY)"],
            [
                "--api-key '$(DATA_PLANE_KEY)': give a value from the environment as "
                "--api-key=$(DATA_PLANE_KEY)"
            ],
            id="environment-value-apart",
        ),
        pytest.param(["--api-key=$(DATA_PLANE_KEY)"], [], id="environment-value-attached"),
    ],
)
def test_sglang_args(args: list[str], problems: list[str]) -> None:
    assert list(check_args(args)) == problems


def test_the_hicache_flags_as_rendered_are_sglangs() -> None:
    args: list[str] = predictor(load(TIERED))["model"]["args"]
    tier = args[args.index("--enable-hierarchical-cache") :]
    assert [a for a in tier if a.startswith("--")] == [
        "--enable-hierarchical-cache",
        "--hicache-size",
        "--hicache-write-policy",
    ]
    assert list(check_args(args)) == []


def test_cli_prints_one_line_per_problem_and_exits_1(tmp_path: Path) -> None:
    doc = load(ISVC)
    predictor(doc).update(scaleMetric="gpu", minReplicas="zero")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(app, ["validate", str(bad)])
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.startswith(str(bad))]
    assert len(lines) == 2
    assert result.output.strip().endswith("2 problems")


def test_findings_stream_document_by_document(tmp_path: Path) -> None:
    """The first bad document of a long file is reported before the rest is read: here the
    rest ends in a YAML error, and the bad document's finding still comes first."""
    doc = load(ISVC)
    predictor(doc).update(minReplicas="zero")
    good = yaml.safe_dump(load(ISVC))
    long = tmp_path / "long.yaml"
    text = "---\n".join([yaml.safe_dump(doc), *[good] * 200, "key: [unclosed\n"])
    long.write_text(text)
    findings = iter_findings([long])
    first = next(findings)
    assert first.obj == "InferenceService/" + doc["metadata"]["name"]
    assert "minReplicas" in first.location
    rest = list(findings)
    broken_line = len(text.splitlines())
    assert [f.obj for f in rest] == ["-"], rest
    assert f"line {broken_line}, column 6" in rest[0].message, rest


def test_cli_missing_path_is_a_problem(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["validate", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 1
    assert "no such file or folder" in result.output


AUDIT_CASES = load_cases()


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name) for c in AUDIT_CASES])
def test_audit_case(case: AuditCase) -> None:
    findings = validate_documents(case.manifests, source="case.yaml", features=case.features)
    if case.refusal is None:
        assert findings == [], [str(f) for f in findings]
        return
    want = case.refusal
    matches = [
        f
        for f in findings
        if f.obj == want.object and f.location == want.field and want.message in f.message
    ]
    assert matches, [str(f) for f in findings]


def test_every_rule_group_has_an_accepted_and_a_refused_case() -> None:
    for rule in {c.rule for c in AUDIT_CASES}:
        outcomes = {c.refusal is None for c in AUDIT_CASES if c.rule == rule}
        assert outcomes == {True, False} or rule == "multinode-pods", rule


def test_audit_case_bases_are_each_accepted_alone() -> None:
    bases = yaml.safe_load((CASES_DIR / "bases.yaml").read_text())
    runtimes = [bases["runtime"], bases["multinode-runtime"]]
    for name in ("isvc", "multinode-isvc"):
        assert validate_documents([*runtimes, bases[name]], source="bases.yaml") == [], name


def test_cli_judges_knative_pods_under_the_features_given(tmp_path: Path) -> None:
    folders = [str(REPO / "runtimes"), str(REPO / "inferenceservices")]
    assert CliRunner().invoke(app, ["validate", *folders]).exit_code == 0
    stock = ["--feature", "kubernetes.podspec-affinity=disabled"]
    result = CliRunner().invoke(app, ["validate", *folders, *stock])
    assert result.exit_code == 1
    assert "Knative refuses nodeSelector while config-features" in result.output
    assert "Knative refuses tolerations while config-features" in result.output


def test_cli_refuses_a_malformed_feature() -> None:
    result = CliRunner().invoke(app, ["validate", str(RUNTIME), "--feature", "multi-container"])
    assert result.exit_code == 2
    assert "NAME=enabled|disabled|allowed" in result.output


# Hostile input (#18): each was a traceback before; now one line naming the file and the entry.
@pytest.mark.parametrize(
    ("files", "expected"),
    [
        pytest.param(
            {"bad.yaml": b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: \xff\n"},
            ["bad.yaml: -: cannot read: not UTF-8 text (byte 49 is 0xff)"],
            id="not-utf8",
        ),
        pytest.param(
            {"list.yaml": b"apiVersion: [v1]\nkind: ConfigMap\nmetadata: [1]\nspec: x\n"},
            [
                "list.yaml: document 1: apiVersion: must be a non-empty string, not list",
                "list.yaml: document 1: metadata: must be a mapping, not list",
                "list.yaml: document 1: spec: must be a mapping, not str",
            ],
            id="fields-of-the-wrong-shape",
        ),
        pytest.param(
            {"kustomization.yaml": b"resources: [.]\n"},
            ["kustomization.yaml: -: the kustomization includes itself"],
            id="kustomization-includes-itself",
        ),
        pytest.param(
            {"kustomization.yaml": b"resources: [../../etc/passwd]\n"},
            [
                "kustomization.yaml: -: resource '../../etc/passwd' is a file outside the "
                "kustomization's folder"
            ],
            id="kustomization-reaches-outside-its-folder",
        ),
        pytest.param(
            {"kustomization.yaml": b"resources: {a: b}\n"},
            ["kustomization.yaml: -: resources must be a list of paths"],
            id="kustomization-resources-not-a-list",
        ),
    ],
)
def test_hostile_manifests_are_problems_not_tracebacks(
    tmp_path: Path, files: dict[str, bytes], expected: list[str]
) -> None:
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    result = CliRunner().invoke(app, ["validate", str(tmp_path)])
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    for line in expected:
        assert f"{tmp_path}/{line}" in lines, result.output


def test_an_endless_manifest_is_one_problem_after_a_bound() -> None:
    result = CliRunner().invoke(app, ["validate", "/dev/zero"])
    assert result.exit_code == 1, result.output
    assert "/dev/zero: -: cannot read: larger than 32 MiB" in result.output


def test_render_into_a_file_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    target = tmp_path / "out"
    target.write_text("mine")
    result = CliRunner().invoke(app, ["render", "--out", str(target)])
    assert result.exit_code == 2
    assert f"--out {target}: not a folder" in result.output
    assert target.read_text() == "mine" and sorted(tmp_path.iterdir()) == [target]


@pytest.mark.parametrize("blocked", ["dashboards", "deploy", "inferenceservices"])
def test_render_with_a_file_where_a_folder_goes_writes_nothing(
    tmp_path: Path, blocked: str
) -> None:
    (tmp_path / blocked).write_text("mine")
    result = CliRunner().invoke(app, ["render", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert f"{tmp_path / blocked}: a file where a folder goes" in result.output
    assert [p.name for p in tmp_path.iterdir()] == [blocked]
    assert (tmp_path / blocked).read_text() == "mine"
