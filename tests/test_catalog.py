"""The catalog: the example loads; every kind of bad catalog is rejected with a located message."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml
from typer.testing import CliRunner

from radixfleet.cli import app
from radixfleet.config import ConfigError, load_catalog, parse_catalog
from radixfleet.config.catalog import HicacheStorageBackend, HicacheWritePolicy
from radixfleet.config.sizing import kv_capacity_tokens
from radixfleet.sglang_flags import sglang_flags

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "inferenceservices" / "catalog.yaml"


def example() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    return data


def problems_of(data: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_catalog(yaml.safe_dump(data), source="catalog.yaml")
    return [str(p) for p in caught.value.problems]


def test_example_catalog_has_every_kind_of_model() -> None:
    catalog = load_catalog(EXAMPLE)
    runtimes = {m.runtime for m in catalog.models}
    assert runtimes == {
        "sglang",
        "sglang-tp",
        "sglang-lora",
        "sglang-multinode",
        "sglang-pd",
    }
    assert any(m.min_replicas == 0 and m.gpus_per_replica == 1 for m in catalog.models)
    assert any(m.tensor_parallel == 4 for m in catalog.models)


def _set(path: str, value: Any) -> Any:
    """A mutation of the example catalog that sets one field (dotted path with [i] indexes)."""

    def mutate(data: dict[str, Any]) -> None:
        parts = path.replace("]", "").replace("[", ".").split(".")
        node: Any = data
        for part in parts[:-1]:
            node = node[int(part)] if part.isdigit() else node[part]
        last = parts[-1]
        node[int(last) if last.isdigit() else last] = value

    return mutate


def _all(*mutations: Any) -> Any:
    """One mutation of the example catalog that makes each of `mutations` in turn."""

    def mutate(data: dict[str, Any]) -> None:
        for one in mutations:
            one(data)

    return mutate


def _duplicate_model(data: dict[str, Any]) -> None:
    data["models"].append(copy.deepcopy(data["models"][0]))


BAD_CATALOGS = [
    pytest.param(
        _set("models[0].runtime", "vllm"),
        "catalog.yaml: models[0].runtime: unknown runtime 'vllm'",
        id="unknown-runtime",
    ),
    pytest.param(
        _set("models[0].name", "Llama_8B"),
        "catalog.yaml: models[0].name: 'Llama_8B' is not a DNS-1123 label",
        id="name-not-dns1123",
    ),
    pytest.param(
        _set("tenants[0].namespaces[0]", "team.search"),
        "catalog.yaml: tenants[0].namespaces[0]: 'team.search' is not a DNS-1123 label",
        id="namespace-not-dns1123",
    ),
    pytest.param(
        _set("models[1].tensor_parallel", 3),
        "catalog.yaml: models[1].tensor_parallel: 3 does not divide gpus_per_replica 4",
        id="tp-does-not-divide-gpus",
    ),
    pytest.param(
        _set("models[1].pipeline_parallel", 3),
        "catalog.yaml: models[1].pipeline_parallel: 3 does not divide gpus_per_replica 4",
        id="pp-does-not-divide-gpus",
    ),
    pytest.param(
        _set("models[1].expert_parallel", 3),
        "catalog.yaml: models[1].expert_parallel: 3 does not divide tensor_parallel 4",
        id="ep-does-not-divide-tp",
    ),
    pytest.param(
        _set("models[1].gpus_per_replica", 8),
        "catalog.yaml: models[1].gpus_per_replica: 8 GPUs but tensor_parallel x "
        "pipeline_parallel is 4",
        id="tp-times-pp-not-gpus",
    ),
    pytest.param(
        _set("models[0].min_replicas", 9),
        "catalog.yaml: models[0].min_replicas: 9 is above max_replicas 8",
        id="min-above-max-replicas",
    ),
    pytest.param(
        _set("models[0].gpu_type", "L4"),
        "catalog.yaml: models[0].regions[0]: region 'us-east-1' has no GPU pool of type L4",
        id="gpu-type-no-region-offers",
    ),
    pytest.param(
        _set("models[0].gpu_type", "TPUv5"),
        "catalog.yaml: models[0].gpu_type: unknown GPU type 'TPUv5'",
        id="unknown-gpu-type",
    ),
    pytest.param(
        _set("models[0].tenants", ["search", "marketing"]),
        "catalog.yaml: models[0].tenants[1]: no tenant named 'marketing'",
        id="unknown-tenant",
    ),
    pytest.param(
        _set("models[0].regions", ["us-west-2"]),
        "catalog.yaml: models[0].regions[0]: no region named 'us-west-2'",
        id="unknown-region",
    ),
    pytest.param(
        _duplicate_model,
        "catalog.yaml: models[5].name: duplicate name 'llama-3-1-8b'",
        id="duplicate-model-name",
    ),
    pytest.param(
        _set("models[2].lora_adapters[1].tenant", "research"),
        "catalog.yaml: models[2].lora_adapters[1].tenant: 'research' is not one of the model's "
        "tenants",
        id="adapter-of-a-tenant-the-model-does-not-serve",
    ),
    pytest.param(
        _set("models[2].lora_adapters[1].tenant", "support"),
        "catalog.yaml: models[2].tenants[1]: 'search' owns no adapter of this LoRA model and "
        "none is shared",
        id="lora-tenant-without-an-adapter",
    ),
    pytest.param(
        _set("tenants[1].namespaces", ["team-search"]),
        "catalog.yaml: tenants[1].namespaces[0]: namespace 'team-search' is already claimed "
        "by tenant 'search'",
        id="namespace-claimed-twice",
    ),
    pytest.param(
        _set("models[0].context_length", 1_000_000),
        "catalog.yaml: models[0].context_length: 1000000 tokens do not fit the KV budget of "
        "one replica (",
        id="context-above-kv-budget",
    ),
    pytest.param(
        _set("regions[0].gpu_pools[0].min_nodes", 7),
        "catalog.yaml: regions[0].gpu_pools[0].min_nodes: 7 is above max_nodes 6",
        id="pool-min-above-max",
    ),
    pytest.param(
        _set("regions[0].gpu_pools[0].model_cache_gib", 450),
        "catalog.yaml: regions[0].gpu_pools[0].model_cache_gib: 450 GiB leaves less than 100 GiB "
        "of the node's 500 GiB volume (root_volume_gib) for images and scratch",
        id="model-cache-above-the-volume",
    ),
    pytest.param(
        _set("regions[0].gpu_pools[1].model_cache_gib", 0),
        "catalog.yaml: regions[0].gpu_pools[1].model_cache_gib: the H100 pools of us-east-1 "
        "cache models all or none: h100-spot has no cache, h100-ondemand has 200 GiB",
        id="model-cache-on-some-pools-of-a-gpu-type",
    ),
    pytest.param(
        _set("regions[0].gpu_pools[1].model_cache_gib", 140),
        "catalog.yaml: regions[0].gpu_pools[1].model_cache_gib: 140 GiB do not hold the 147 GiB "
        "of the H100 models us-east-1 caches (llama-3-1-8b 15, llama-3-1-70b 132)",
        id="model-cache-smaller-than-its-models",
    ),
    pytest.param(
        _set("regions[0].gpu_pools[0].instance_type", "x9.huge"),
        "catalog.yaml: regions[0].gpu_pools[0].instance_type: unknown GPU instance type 'x9.huge'",
        id="unknown-instance-type",
    ),
    pytest.param(
        _set("models[0].storage_uri", "ftp://models/x"),
        "catalog.yaml: models[0].storage_uri: 'ftp://models/x' must start with one of",
        id="bad-storage-scheme",
    ),
    pytest.param(
        _set("models[0].max_replica", 3),
        "catalog.yaml: models[0].max_replica: unknown field",
        id="unknown-field",
    ),
    pytest.param(
        _set("models[0].max_replicas", "eight"),
        "catalog.yaml: models[0].max_replicas: 'eight': Input should be a valid integer",
        id="wrong-type",
    ),
    pytest.param(
        _set("models[4].pd_peer", "llama-3-1-8b"),
        "catalog.yaml: models[4].pd_peer: unknown field",
        id="pd-peer-is-gone",
    ),
    pytest.param(
        _set("models[4].runtime", "sglang-prefill"),
        "catalog.yaml: models[4].runtime: sglang-prefill is a role of a prefill/decode model: "
        "write one model with runtime sglang-pd and disaggregation",
        id="pd-role-runtime-as-a-model",
    ),
    pytest.param(
        _set("models[4].runtime", "sglang-tp"),
        "catalog.yaml: models[4].disaggregation: runtime sglang-pd and disaggregation go together",
        id="pd-disaggregation-on-another-runtime",
    ),
    pytest.param(
        _set("models[1].runtime", "sglang-pd"),
        "catalog.yaml: models[1].runtime: runtime sglang-pd and disaggregation go together",
        id="pd-runtime-without-disaggregation",
    ),
    pytest.param(
        _set("models[4].canary_policy", "llm-default"),
        "catalog.yaml: models[4].canary_policy: a prefill/decode model cannot roll out as one",
        id="pd-model-with-a-canary",
    ),
    pytest.param(
        _set("models[4].max_replicas", 4),
        "catalog.yaml: models[4].max_replicas: a prefill/decode model's replicas are per role: "
        "disaggregation.prefill.max_replicas and disaggregation.decode.max_replicas",
        id="pd-model-with-model-level-replicas",
    ),
    pytest.param(
        _set("models[4].disaggregation.decode.min_replicas", 3),
        "catalog.yaml: models[4].disaggregation.decode: min_replicas 3 is above max_replicas 2",
        id="pd-role-min-above-max",
    ),
    pytest.param(
        _set("models[4].disaggregation.transfer_backend", "carrier-pigeon"),
        "catalog.yaml: models[4].disaggregation.transfer_backend: 'carrier-pigeon': Input should "
        "be 'mooncake' or 'nixl'",
        id="pd-unknown-transfer-backend",
    ),
    pytest.param(
        _set("models[1].name", "llama-3-1-70b-pd-decode"),
        "catalog.yaml: models[4].name: its decode InferenceService llama-3-1-70b-pd-decode is a "
        "model's name",
        id="pd-role-name-taken",
    ),
    pytest.param(
        _set("tenants[2].token_budget.per_model", {"llama-3-1-70b-pd-prefill": 1000}),
        "catalog.yaml: tenants[2].token_budget.per_model.llama-3-1-70b-pd-prefill: no model "
        "named 'llama-3-1-70b-pd-prefill'",
        id="pd-token-budget-names-a-half",
    ),
    pytest.param(
        _set("models[2].runtime", "sglang"),
        "catalog.yaml: models[2].lora_adapters: LoRA adapters need runtime sglang-lora",
        id="lora-without-lora-runtime",
    ),
    pytest.param(
        _set("models[3].storage_uri", "s3://radixfleet-models/llama-405b"),
        "catalog.yaml: models[3].storage_uri: multi-node models load from pvc:// or oci://, "
        "not s3://",
        id="multinode-storage-not-pvc-or-oci",
    ),
    *(
        pytest.param(
            _set("models[0].storage_uri", uri),
            f"catalog.yaml: models[0].storage_uri: '{uri}' must name a folder inside "
            "s3://radixfleet-models",
            id=f"storage-uri-{name}",
        )
        for name, uri in [
            ("bucket-root", "s3://radixfleet-models/"),
            ("bucket-alone", "s3://radixfleet-models"),
            ("dot-dot", "s3://radixfleet-models/meta-llama/../adapters"),
        ]
    ),
    pytest.param(
        _set("models[0].storage_uri", "s3://radixfleet-models/*"),
        "catalog.yaml: models[0].storage_uri: 's3://radixfleet-models/*': no wildcards",
        id="storage-uri-wildcard-granted-every-tenants-weights",
    ),
    pytest.param(
        _set("models[0].storage_uri", "s3://radixfleet-models/adapters"),
        "catalog.yaml: models[0].storage_uri: s3://radixfleet-models/adapters reaches tenant "
        "'support''s adapter s3://radixfleet-models/adapters/support-tone",
        id="a-shared-model-over-another-tenants-adapter",
    ),
    pytest.param(
        _set(
            "models[2].lora_adapters[1].storage_uri",
            "s3://radixfleet-models/adapters/support-tone/v2",
        ),
        "catalog.yaml: models[2].lora_adapters[1].storage_uri: "
        "s3://radixfleet-models/adapters/support-tone/v2 reaches tenant 'support''s adapter",
        id="an-adapter-inside-another-tenants-adapter",
    ),
    pytest.param(
        _set("tenants[0].namespaces", ["kube-system"]),
        "catalog.yaml: tenants[0].namespaces[0]: 'kube-system' belongs to Kubernetes or the "
        "platform, not to a tenant",
        id="tenant-claims-kube-system",
    ),
    pytest.param(
        _set("tenants[0].namespaces", ["radixfleet-system"]),
        "catalog.yaml: tenants[0].namespaces[0]: 'radixfleet-system' belongs to",
        id="tenant-claims-the-operators-namespace",
    ),
    *(
        pytest.param(
            _set("tenants[0].namespaces", [namespace]),
            f"catalog.yaml: tenants[0].namespaces[0]: '{namespace}' belongs to",
            id=f"tenant-claims-{namespace}",
        )
        for namespace in ("knative-operator", "kserve-localmodel-jobs", "istio-system")
    ),
    pytest.param(
        _set("models[0].max_replicas", 2**70),
        f"catalog.yaml: models[0].max_replicas: {2**70}: Input should be less than or equal to "
        "2147483647",
        id="max-replicas-beyond-int32",
    ),
    pytest.param(
        _set("models[0].architecture.params_billion", 1e300),
        "catalog.yaml: models[0].architecture.params_billion: 1e+300: Input should be less than "
        "or equal to 100000",
        id="params-billion-1e300-was-a-traceback",
    ),
    *(
        pytest.param(
            _set(field, 2**70),
            f"catalog.yaml: {field}: {2**70}: Input should be less",
            id=f"{field}-2**70",
        )
        for field in (
            "regions[0].gpu_pools[0].max_nodes",
            "regions[0].gpu_pools[0].model_cache_gib",
            "tenants[0].gpu_budget.H100.guaranteed",
            "tenants[0].token_budget.tokens_per_minute",
            "models[0].slo.ttft_p95_ms",
            "models[0].context_length",
            "models[2].max_loras_per_batch",
        )
    ),
    pytest.param(
        _set("models[2].hf_token_secret", None),
        "catalog.yaml: models[2].storage_uri: hf://meta-llama/Llama-3.1-8B-Instruct is a gated "
        "repository: name the Secret holding a hub token in hf_token_secret",
        id="a-gated-hub-base-without-a-token-failed-with-401-at-the-pod",
    ),
    pytest.param(
        _set("models[2].hf_token_secret", {"name": "hf-token", "key": "HF TOKEN"}),
        "catalog.yaml: models[2].hf_token_secret.key",
        id="a-secret-key-kubernetes-refuses",
    ),
    pytest.param(
        _set("tenants[1].token_budget.per_model.llama-3-1-8b", 10**12),
        "catalog.yaml: tenants[1].token_budget: a model's budget cannot exceed tokens_per_minute: "
        "llama-3-1-8b",
        id="a-models-token-budget-above-the-tenants-was-a-traceback",
    ),
    pytest.param(
        _set("models[0].architecture.params_billion", float("inf")),
        "catalog.yaml: models[0].architecture.params_billion: inf: Input should be a finite number",
        id="params-billion-infinite",
    ),
    pytest.param(
        _set("tenants[0].api_keys", [{"name": "ci"}, {"name": "ci"}]),
        "catalog.yaml: tenants[0]: api_keys: each name once",
        id="api-key-named-twice",
    ),
    pytest.param(
        _set("tenants[0].api_keys", [{"name": "ci", "expires_at": "2027-01-31T00:00:00"}]),
        "catalog.yaml: tenants[0].api_keys[0]: expires_at needs a time zone",
        id="api-key-expiry-without-a-zone",
    ),
    pytest.param(
        _set("tenants[0].api_keys", []),
        "catalog.yaml: tenants[0].api_keys: ",
        id="a-tenant-with-no-key",
    ),
    pytest.param(
        _set("tenants[0].api_keys", [{"name": "CI_key"}]),
        "catalog.yaml: tenants[0].api_keys[0].name: 'CI_key' is not a DNS-1123 label",
        id="api-key-name-not-a-label",
    ),
    pytest.param(
        _set("models[0].name", "8b-llama"),
        "catalog.yaml: models[0].name: '8b-llama' must start with a letter: it names an "
        "InferenceService",
        id="model-name-validate-would-refuse",
    ),
    pytest.param(
        _set("models[0].tokenizer", "meta-llama/Llama-3.1-8B-Instruct"),
        "catalog.yaml: models[0].tokenizer: 'meta-llama/Llama-3.1-8B-Instruct' must be "
        "hf://ORG/NAME or an absolute folder in the router's image",
        id="tokenizer-neither-hub-nor-folder",
    ),
    pytest.param(
        _set("models[0].tokenizer", "hf://meta-llama"),
        "catalog.yaml: models[0].tokenizer: 'hf://meta-llama' must name a Hugging Face "
        "repository: hf://ORG/NAME",
        id="tokenizer-hub-without-a-name",
    ),
    pytest.param(
        _set("models[0].tokenizer", "/opt/smg/../../etc"),
        "catalog.yaml: models[0].tokenizer: '/opt/smg/../../etc' must be hf://ORG/NAME or an "
        "absolute folder",
        id="tokenizer-folder-climbing-out",
    ),
    # A host KV tier (models[].kv_cache): what SGLang and the nodes of the model's pools hold.
    pytest.param(
        _set("models[0].kv_cache", {"host_gib": 256}),
        "catalog.yaml: models[0].kv_cache.host_gib: 8 pods of 300 GiB need 2400 GiB of a node of "
        "pool us-east-1/h100-ondemand (p5.48xlarge), which has 1945 GiB for pods (2048 GiB less "
        "103 GiB for the kubelet and the system)",
        id="host-tier-of-8-replicas-past-a-p5-node",
    ),
    pytest.param(
        _set("models[1].kv_cache", {"host_gib": 900}),
        "catalog.yaml: models[1].kv_cache.host_gib: 2 pods of 1084 GiB need 2168 GiB of a node "
        "of pool us-east-1/h100-ondemand (p5.48xlarge)",
        id="host-tier-of-2-tp4-replicas-past-a-p5-node",
    ),
    pytest.param(
        _set("models[0].kv_cache", {"host_gib": 48}),
        "catalog.yaml: models[0].kv_cache.host_gib: 48 GiB (51 GB a rank, 1 ranks) is not larger "
        "than the replica's KV pool on its GPUs (51.8 GiB: 424697 tokens of 131072 bytes)",
        id="host-tier-not-above-the-device-pool",
    ),
    pytest.param(
        _set("models[1].kv_cache", {"host_gib": 136}),
        "catalog.yaml: models[1].kv_cache.host_gib: 136 GiB (36 GB a rank, 4 ranks) is not larger",
        id="host-tier-above-the-device-pool-in-gib-but-not-once-floored-per-rank",
    ),
    pytest.param(
        _set("models[3].kv_cache", {"host_gib": 8}),
        "catalog.yaml: models[3].kv_cache.host_gib: 8 GiB over the replica's 16 ranks is under "
        "1 GB each: SGLang takes --hicache-size per rank in whole GB",
        id="host-tier-under-1-gb-a-rank",
    ),
    pytest.param(
        _set("models[1].kv_cache", {"host_gib": 512, "storage_backend": "file"}),
        "catalog.yaml: models[1].kv_cache.storage_backend: 'file': infra provides no KV storage "
        "backend yet, host memory is the only tier below the GPUs (infra/README.md, KV cache "
        "tiers)",
        id="storage-backend-infra-does-not-provide",
    ),
    pytest.param(
        _set("models[1].kv_cache", {"host_gib": 512, "write_policy": "write_around"}),
        "catalog.yaml: models[1].kv_cache.write_policy: 'write_around': Input should be "
        "'write_back', 'write_through' or 'write_through_selective'",
        id="write-policy-sglang-does-not-know",
    ),
    pytest.param(
        _all(_set("models[0].nodes", 2), _set("models[0].kv_cache", {"host_gib": 64})),
        "catalog.yaml: models[0].nodes: 2 nodes do not divide gpus_per_replica 1",
        id="host-tier-of-a-replica-on-more-nodes-than-gpus-is-no-traceback",
    ),
    pytest.param(
        _set("models[1].kv_cache", {"host_gib": 0}),
        "catalog.yaml: models[1].kv_cache.host_gib: 0: Input should be greater than 0",
        id="host-tier-of-zero",
    ),
    pytest.param(
        _set("models[1].kv_cache", {"host_gib": "512Gi"}),
        "catalog.yaml: models[1].kv_cache.host_gib: '512Gi': Input should be a valid integer",
        id="host-tier-as-a-quantity",
    ),
    pytest.param(
        _set("models[3].weights_claim", None),
        "catalog.yaml: models[3].weights_claim: no claim 'model-cache' is made for "
        "pvc://model-cache/llama-3.1-405b-fp8: give weights_claim: {storage_class: CLASS}",
        id="pvc-model-without-a-claim",
    ),
    pytest.param(
        _set("models[0].weights_claim", {"existing": True}),
        "catalog.yaml: models[0].weights_claim: only a pvc:// model has a claim, not s3://",
        id="claim-of-an-s3-model",
    ),
    pytest.param(
        _set("models[3].weights_claim", {"existing": True, "storage_class": "efs"}),
        "catalog.yaml: models[3].weights_claim: give storage_class (render "
        "creates the claim) or existing: true",
        id="claim-both-made-and-existing",
    ),
    pytest.param(
        _set("models[3].weights_claim", {}),
        "catalog.yaml: models[3].weights_claim: give storage_class (render "
        "creates the claim) or existing: true",
        id="claim-neither-made-nor-existing",
    ),
]


@pytest.mark.parametrize(("mutate", "expected"), BAD_CATALOGS)
def test_bad_catalog_names_file_entry_and_field(mutate: Any, expected: str) -> None:
    data = example()
    mutate(data)
    problems = problems_of(data)
    assert any(p.startswith(expected) for p in problems), problems


def test_a_tenant_names_its_keys_and_their_expiries_and_has_one_key_by_default() -> None:
    data = example()
    text = yaml.safe_dump(data).replace(
        "  name: support\n",
        "  name: support\n  api_keys:\n  - {name: 2026-11, expires_at: 2026-12-31T00:00:00Z}\n"
        "  - {name: 2026-12}\n",
    )
    catalog = parse_catalog(text, source="catalog.yaml")
    support = catalog.tenant("support")
    assert [k.name for k in support.api_keys] == ["2026-11", "2026-12"]
    expiry = support.api_keys[0].expires_at
    assert expiry is not None and expiry.isoformat() == "2026-12-31T00:00:00+00:00"
    assert [k.name for k in catalog.tenant("search").api_keys] == ["api-key"]


def test_every_problem_is_reported_at_once() -> None:
    data = example()
    _set("models[0].runtime", "vllm")(data)
    _set("models[1].tensor_parallel", 3)(data)
    _set("models[3].tenants", ["nobody"])(data)
    assert len(problems_of(data)) == 3


def test_cli_render_of_bad_catalog_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    data = example()
    _set("models[1].tensor_parallel", 3)(data)
    bad = tmp_path / "catalog.yaml"
    bad.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["render", "--catalog", str(bad), "--out", str(out)])
    assert result.exit_code == 2
    assert "models[1].tensor_parallel: 3 does not divide gpus_per_replica 4" in result.output
    assert not out.exists()


def test_an_endless_catalog_is_refused_after_a_bound_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["render", "--catalog", "/dev/zero", "--out", str(out)])
    assert result.exit_code == 2
    assert "/dev/zero: larger than 32 MiB: not a file radixfleet reads" in result.output
    assert not out.exists()


def test_render_of_a_catalog_outside_the_repository_needs_out(tmp_path: Path) -> None:
    # Without --out, render writes runtimes/, dashboards/ and deploy/ beside the catalog's
    # folder: for a catalog anywhere but an inferenceservices/ folder, those are not ours.
    folder = tmp_path / "work" / "team"
    folder.mkdir(parents=True)
    (folder / "catalog.yaml").write_text(EXAMPLE.read_text())
    mine = tmp_path / "work" / "notes.yaml"
    mine.write_text("# Generated by `radixfleet render` ... but not by this one\n")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    result = CliRunner().invoke(app, ["render", "--catalog", str(folder / "catalog.yaml")])
    assert result.exit_code == 2
    assert "outside an inferenceservices/ folder, render needs --out DIR" in result.output
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("regions: [", "catalog.yaml: line 1: not valid YAML", id="broken-yaml"),
        pytest.param("- a\n- b\n", "catalog.yaml: must be a mapping", id="not-a-mapping"),
        pytest.param(
            "regions: []\ntenants: []\nregions: []\n",
            "catalog.yaml: line 3: duplicate key 'regions'",
            id="duplicate-top-level-key",
        ),
        pytest.param(
            "tenants:\n- name: a\n  namespaces: [team-a]\n  namespaces: [team-b]\n",
            "catalog.yaml: line 4: duplicate key 'namespaces'",
            id="duplicate-key-moves-a-tenant",
        ),
    ],
)
def test_unreadable_catalog(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_catalog(text, source="catalog.yaml")
    assert str(caught.value.problems[0]).startswith(expected)


def test_kv_capacity_of_8b_on_h100_matches_calibration() -> None:
    # CALIBRATION.md: about 420,000 tokens (+-10 %) for Llama-3.1-8B bf16 on one H100.
    model = load_catalog(EXAMPLE).models[0]
    assert 378_000 <= kv_capacity_tokens(model) <= 462_000


def test_a_catalog_that_is_not_utf8_is_one_clear_problem(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_bytes(b"regions: []\ntenants: [\xff]\n")
    with pytest.raises(ConfigError) as caught:
        load_catalog(path)
    assert str(caught.value.problems[0]) == f"{path}: not UTF-8 text (byte 22 is 0xff)"


@pytest.mark.parametrize(
    ("mutate", "model"),
    [
        pytest.param(lambda d: None, 1, id="the-example-70b"),
        pytest.param(_set("models[3].kv_cache", {"host_gib": 1024}), 3, id="multinode-405b"),
        pytest.param(
            # 8 x (34 GiB of staging + 192 + the 10 SGLang keeps) = 1888 of the node's 1945.
            _set("models[0].kv_cache", {"host_gib": 192, "write_policy": "write_back"}),
            0,
            id="8-replicas-of-8b-on-a-p5-node",
        ),
    ],
)
def test_a_host_tier_the_nodes_hold_is_accepted(mutate: Any, model: int) -> None:
    data = example()
    mutate(data)
    catalog = parse_catalog(yaml.safe_dump(data), source="catalog.yaml")
    assert catalog.models[model].kv_cache is not None


@pytest.mark.parametrize(
    ("kind", "flag"),
    [
        pytest.param(HicacheWritePolicy, "--hicache-write-policy", id="write-policy"),
        pytest.param(HicacheStorageBackend, "--hicache-storage-backend", id="storage-backend"),
    ],
)
def test_kv_cache_choices_are_sglangs(kind: Any, flag: str) -> None:
    assert get_args(kind) == sglang_flags()[flag].choices


def test_a_tenants_token_budget_names_a_prefill_decode_model_as_one() -> None:
    """The entry charges a P/D model's tokens to its one name: a budget per model names it."""
    data = example()
    data["tenants"][2]["token_budget"]["per_model"] = {"llama-3-1-70b-pd": 1000}
    catalog = parse_catalog(yaml.safe_dump(data), source="catalog.yaml")
    budget = catalog.tenant("research").token_budget
    assert budget is not None and budget.per_model == {"llama-3-1-70b-pd": 1000}
