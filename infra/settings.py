"""The stack configuration, typed: infra-only settings plus the catalog they point at.

Regions, GPU pools and models come from the catalog file that `radixfleet:catalog` names, read by
the same `radixfleet.config` module as `radixfleet render`, so pool names and labels have one
source. Everything else (versions, network, DNS, model store) lives in the stack config. Parsing
reports every problem at once, located by config key, before any resource is declared.
"""

from __future__ import annotations

import ipaddress
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr, ValidationError
from pydantic.alias_generators import to_camel

from radixfleet.config import Catalog, ConfigError, Problem, Region, load_catalog
from radixfleet.config.catalog import MAX_NODES, MAX_VOLUME_GIB
from radixfleet.config.load import pydantic_problems
from radixfleet.render.inferenceservices import MODEL_READER

NAMESPACE = "radixfleet"

# A pinned version: exact numbers, optionally a `v` and a build suffix (`v1.19.5-eksbuild.1`).
# Ranges, `latest` and bare majors would let two `pulumi up` runs install different software.
PINNED = re.compile(r"^v?\d+\.\d+\.\d+([-+][0-9A-Za-z.-]+)?$")
KUBERNETES_MINOR = re.compile(r"^1\.\d{2}$")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
DURATION = re.compile(r"^(\d+)(s|m|h)$")
AWS_REGION = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d$")
BUCKET = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")

# Helm charts every region installs; a stack config must pin each one.
REQUIRED_CHARTS = (
    "nvidia-device-plugin",
    "dcgm-exporter",
    "cert-manager",
    "knative-operator",
    "kserve-crd",
    "kserve-resources",
    "kube-prometheus-stack",
    "cluster-autoscaler",
)
# EKS-managed add-ons every cluster runs; pinned like the charts.
REQUIRED_EKS_ADDONS = (
    "vpc-cni",
    "coredns",
    "kube-proxy",
    "eks-pod-identity-agent",
    "aws-ebs-csi-driver",
)


def _pinned(value: str) -> str:
    if not PINNED.match(value):
        raise ValueError(f"{value!r} is not a pinned version like 1.2.3 or v1.2.3-build.1")
    return value


# What the example stack writes where a team puts the digest its push printed.
PLACEHOLDER_DIGEST = "sha256:" + "0" * 64


def _digest(value: str) -> str:
    if not DIGEST.match(value):
        raise ValueError(f"{value!r} is not an image digest like sha256:<64 hex digits>")
    if value == PLACEHOLDER_DIGEST:
        raise ValueError("is the example's placeholder: put the digest your image push printed")
    return value


def _kubernetes_minor(value: str) -> str:
    if not KUBERNETES_MINOR.match(value):
        raise ValueError(f"{value!r} is not a Kubernetes minor version such as '1.33'")
    return value


def duration_seconds(value: str) -> int:
    """Seconds of a Knative-style duration such as `60s`, `5m` or `1h`."""
    match = DURATION.match(value)
    if match is None:
        raise ValueError(f"{value!r} is not a duration like 60s, 5m or 1h")
    return int(match.group(1)) * {"s": 1, "m": 60, "h": 3600}[match.group(2)]


def _duration(value: str) -> str:
    duration_seconds(value)
    return value


Pinned = Annotated[str, AfterValidator(_pinned)]
Digest = Annotated[str, AfterValidator(_digest)]
Duration = Annotated[str, AfterValidator(_duration)]


class Settings(BaseModel):
    """Base of every stack-config type: camelCase keys as Pulumi YAML writes them, no extras."""

    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, alias_generator=to_camel, populate_by_name=True
    )


class Chart(Settings):
    """Where a Helm chart comes from and the exact version to install."""

    repo: str
    version: Pinned
    # The published chart name when it differs from the key (KServe's kserve-resources chart is
    # published as `kserve`).
    chart: str | None = None


class SystemNodes(Settings):
    """The node group for the add-ons and controllers; GPU pools come from the catalog."""

    instance_type: str = "m7i.2xlarge"
    min_nodes: Annotated[int, Field(ge=1, le=MAX_NODES)] = 2
    max_nodes: Annotated[int, Field(ge=1, le=MAX_NODES)] = 6
    root_volume_gib: Annotated[int, Field(ge=20, le=MAX_VOLUME_GIB)] = 100


class ClusterSettings(Settings):
    """The EKS cluster of every region."""

    kubernetes_version: Annotated[str, AfterValidator(_kubernetes_minor)]
    private_endpoint: bool = True
    public_access_cidrs: list[str] = Field(default_factory=list)
    gpu_ami_type: Literal["AL2023_x86_64_NVIDIA", "BOTTLEROCKET_x86_64_NVIDIA"] = (
        "AL2023_x86_64_NVIDIA"
    )
    system_nodes: SystemNodes = SystemNodes()
    addons: dict[str, Pinned]


class NetworkSettings(Settings):
    """The VPC of every region: one CIDR per region so that regions can be peered later."""

    vpc_cidrs: dict[str, str]
    availability_zones: Annotated[int, Field(ge=3, le=6)] = 3
    # One NAT gateway per zone survives a zone outage; `single` trades that for cost.
    nat_gateways: Literal["per-az", "single"] = "per-az"


class KnativeSettings(Settings):
    """Knative Serving's version and the autoscaler settings scale-to-zero depends on."""

    serving_version: Pinned
    scale_to_zero: bool = True
    stable_window: Duration = "60s"
    scale_to_zero_grace_period: Duration = "30s"


class ModelStoreSettings(Settings):
    """The S3 model store: one bucket per region, optionally replicated from a primary."""

    # The bucket the catalog's s3:// URIs name; each region's bucket is `<bucket>-<region>` and
    # the InferenceServices of a region read from theirs.
    bucket: str
    mode: Literal["replicated", "per-region"] = "replicated"
    primary_region: str | None = None
    force_destroy: bool = False
    # The service account serving pods run as in tenant namespaces (rendered with them).
    service_account: str = MODEL_READER


class DnsSettings(Settings):
    """The Route 53 zone holding one weighted record per model and region."""

    zone_id: str
    domain: str
    # Route 53 probes the model's router, not its replicas, so health checks never keep a
    # scale-to-zero model awake.
    health_check_path: str = "/health"
    weights: dict[str, Annotated[int, Field(ge=0, le=255)]] = Field(default_factory=dict)


class ImageSettings(Settings):
    """An image pulled by `digest`, the one a build printed: a tag can be moved, a digest
    cannot; `tag` stays in the reference for people reading it."""

    image: str
    tag: Pinned
    digest: Digest

    @property
    def reference(self) -> str:
        """`image:tag@digest`: Kubernetes pulls by the digest and shows the tag."""
        return f"{self.image}:{self.tag}@{self.digest}"


class ControllerSettings(ImageSettings):
    """radixfleet's image (operator, entry and emulator in one), the operator's replica count
    (leader election picks one), the region entry's (each holds 1/replicas of every token
    budget; two or more keep a region serving through a node drain) and the SGLang gateway
    image the routers controller runs for every serving revision (`router`). The failover
    writes global Route 53 records, so it runs in one region's operator only:
    `failoverRegion` (default: the model store's primary region)."""

    replicas: Annotated[int, Field(ge=1, le=5)] = 2
    entry_replicas: Annotated[int, Field(ge=1, le=20)] = 2
    router: ImageSettings
    failover_region: str | None = None


class ExistingCluster(Settings):
    """One region's cluster on the `kubernetes` cloud: a cluster the team already runs, with
    KServe 0.20 and Knative Serving 1.21 installed (infra/README.md says what else it needs)."""

    # A kubeconfig file, relative to the Pulumi project directory or absolute.
    kubeconfig: str
    context: str | None = None
    # False: no prometheus-operator runs there, so no dashboards, alerting rules or PodMonitors.
    monitoring: bool = True
    # The labels of the nodes the operator and the entry may run on ({}: any node without a
    # taint; the GPU nodes have one). infra's EKS clusters label theirs radixfleet.io/node-role.
    system_node_selector: dict[str, str] = Field(default_factory=dict)


@dataclass(frozen=True)
class AwsSettings:
    """The keys only the `aws` cloud reads, all present (`StackSettings.aws`)."""

    network: NetworkSettings
    cluster: ClusterSettings
    charts: dict[str, Chart]
    knative: KnativeSettings
    model_store: ModelStoreSettings
    dns: DnsSettings


# Each cloud's own keys: a stack of one cloud needs its own and may not set the other's.
AWS_KEYS = ("network", "cluster", "charts", "knative", "modelStore", "dns")
KUBERNETES_KEYS = ("clusters", "fleetToken")


class StackSettings(Settings):
    """Every `radixfleet:*` key of a stack config."""

    # aws: `pulumi up` creates each region's EKS cluster, its GPU node groups, model store and
    # DNS, then the same Kubernetes half as `kubernetes`, which deploys onto clusters the team
    # already runs (`clusters`) and creates no cloud resource.
    cloud: Literal["aws", "kubernetes"] = "aws"
    catalog: str
    regions: list[str] | None = Field(default=None, min_length=1)
    reserved_pools: list[str] = Field(default_factory=list)
    network: NetworkSettings | None = None
    cluster: ClusterSettings | None = None
    charts: dict[str, Chart] | None = None
    knative: KnativeSettings | None = None
    model_store: ModelStoreSettings | None = None
    dns: DnsSettings | None = None
    clusters: dict[str, ExistingCluster] | None = None
    # The fleet token on the `kubernetes` cloud, a secret config value (`pulumi config set
    # --secret radixfleet:fleetToken ...`); the aws stack makes its own (pulumi-random).
    fleet_token: str | None = None
    # The tenants' API keys, on either cloud, a secret config value: per tenant, the value of
    # each key its catalog entry names (`api_keys`), set with `pulumi config set --secret --path
    # 'radixfleet:tenantKeys.<tenant>.<key>' "$(openssl rand -hex 32)"`. The stack is their one
    # source: `up` writes the same values into the tenant's Secret in every region it serves
    # in, so a key works in every region at once, and an added or removed key does too.
    # Unset: the platform team fills those Secrets itself.
    tenant_keys: dict[str, dict[str, SecretStr]] | None = None
    controllers: ControllerSettings
    # SGLang's image, which every ClusterServingRuntime runs: a copy in the team's registry,
    # pulled by that copy's digest (runtimes/ names it by tag, for kustomize overlays to pin).
    runtime: ImageSettings
    # The placeholder pods that hold a pool's `headroom_gpus` free run a pause image (Kubernetes'
    # `pause`, a copy in the team's registry): needed only when a deployed pool asks for headroom.
    pause: ImageSettings | None = None
    dashboards_dir: str = "../dashboards"
    crds_dir: str = "../deploy/crds"

    def aws(self) -> AwsSettings | None:
        """The aws cloud's keys, when every one is set."""
        parts = (self.network, self.cluster, self.charts, self.knative, self.model_store, self.dns)
        network, cluster, charts, knative, model_store, dns = parts
        if (
            network is None or cluster is None or charts is None or knative is None
            or model_store is None or dns is None
        ):  # fmt: skip
            return None
        return AwsSettings(network, cluster, charts, knative, model_store, dns)


# Keys read as plain strings; all others are YAML objects, lists or booleans.
STRING_KEYS = frozenset({"cloud", "catalog", "dashboardsDir", "crdsDir", "fleetToken"})
# Keys whose values are secrets: never quoted in a problem.
SECRET_KEYS = frozenset({"fleetToken", "tenantKeys"})
# A tenant's key: long enough that guessing is hopeless (`openssl rand -hex 32` gives 64), and
# only what an Authorization header carries as it is.
MIN_KEY_CHARS = 32
KEY_CHARS = re.compile(r"^[\x21-\x7e]+$")
CONFIG_KEYS = tuple(field.alias or name for name, field in StackSettings.model_fields.items())


@dataclass(frozen=True)
class Fleet:
    """A fully validated stack: its settings, its catalog and the regions it deploys."""

    settings: StackSettings
    catalog: Catalog
    regions: list[Region]
    base_dir: Path

    def path(self, relative: str) -> Path:
        """A path from the stack config, relative to the Pulumi project directory."""
        return (self.base_dir / relative).resolve()

    @property
    def aws(self) -> AwsSettings:
        """The aws cloud's settings (`parse_fleet` has checked they are all there)."""
        found = self.settings.aws()
        if self.settings.cloud != "aws" or found is None:
            raise ValueError(f"a {self.settings.cloud} stack has no aws settings")
        return found

    def tenant_key_values(self) -> dict[str, dict[str, str]]:
        """The stack's `tenantKeys` as plain strings ({}: unset), for the key Secrets."""
        given = self.settings.tenant_keys or {}
        return {t: {n: v.get_secret_value() for n, v in keys.items()} for t, keys in given.items()}

    @property
    def primary_region(self) -> str:
        store = self.settings.model_store
        return (store.primary_region if store else None) or self.regions[0].name

    @property
    def failover_region(self) -> str:
        """The region whose operator runs the failover (once per fleet)."""
        return self.settings.controllers.failover_region or self.primary_region


def parse_fleet(raw: Mapping[str, Any], *, source: str, base_dir: Path) -> Fleet:
    """Validate the `radixfleet:*` values (keys without the namespace) and load the catalog.

    Raises `ConfigError` with every problem of the stack config and the catalog together.
    """
    try:
        settings = StackSettings.model_validate(dict(raw))
    except ValidationError as exc:
        problems = pydantic_problems(exc, source=source, secret=SECRET_KEYS)
        raise ConfigError([_namespaced(p) for p in problems]) from exc
    catalog = _load(settings, source=source, base_dir=base_dir)
    findings = [*check_stack(settings, catalog), *_check_kubeconfigs(settings, base_dir)]
    problems = [Problem(source, f"{NAMESPACE}:{loc}", msg) for loc, msg in findings]
    if problems:
        raise ConfigError(problems)
    wanted = settings.regions or [r.name for r in catalog.regions]
    return Fleet(settings, catalog, [catalog.region(n) for n in wanted], base_dir)


def _namespaced(problem: Problem) -> Problem:
    return Problem(problem.file, f"{NAMESPACE}:{problem.location}", problem.message)


def _load(settings: StackSettings, *, source: str, base_dir: Path) -> Catalog:
    try:
        return load_catalog((base_dir / settings.catalog).resolve())
    except ConfigError as exc:
        # The catalog's own problems, led by the key that pointed at it.
        lead = Problem(source, f"{NAMESPACE}:catalog", "the catalog it names has problems")
        raise ConfigError([lead, *exc.problems]) from exc


Finding = tuple[str, str]


def check_stack(settings: StackSettings, catalog: Catalog) -> list[Finding]:
    """Every problem relating the stack config to itself and to the catalog."""
    wanted = settings.regions or [r.name for r in catalog.regions]
    deployed = [catalog.region(n) for n in dict.fromkeys(wanted) if n in _names(catalog)]
    common = [
        *_check_regions(settings, catalog),
        *_check_pools(settings, catalog, deployed),
        *_check_failover_region(settings, deployed),
        *_check_tenant_keys(settings, catalog, deployed),
    ]
    if settings.cloud == "kubernetes":
        return [*common, *_check_kubernetes(settings, deployed)]
    return [*common, *_check_aws(settings, catalog, deployed)]


def _check_aws(settings: StackSettings, catalog: Catalog, deployed: list[Region]) -> list[Finding]:
    given = settings.model_dump(by_alias=True)
    findings = [(key, "only for cloud kubernetes") for key in KUBERNETES_KEYS if given[key]]
    findings += [(key, "missing: the aws cloud needs it") for key in AWS_KEYS if not given[key]]
    aws = settings.aws()
    if aws is None:
        return findings
    return [
        *findings,
        *_check_aws_regions(catalog),
        *_check_versions(aws),
        *_check_network(aws, deployed),
        *_check_endpoint(aws),
        *_check_model_store(aws, deployed),
        *_check_dns(aws, deployed),
    ]


def _check_kubernetes(settings: StackSettings, deployed: list[Region]) -> Iterator[Finding]:
    given = settings.model_dump(by_alias=True)
    for key in AWS_KEYS:
        if given[key] is not None:
            yield key, "only for cloud aws: an existing cluster brings its own"
    if not settings.fleet_token:
        yield (
            "fleetToken",
            "missing: set it with `pulumi config set --secret radixfleet:fleetToken`",
        )
    clusters = settings.clusters or {}
    for region in deployed:
        if region.name not in clusters:
            yield f"clusters.{region.name}", "missing: every deployed region needs its kubeconfig"
    yield from _unknown_regions("clusters", clusters, deployed)


def _check_tenant_keys(
    settings: StackSettings, catalog: Catalog, deployed: list[Region]
) -> Iterator[Finding]:
    """`tenantKeys` holds a good value for exactly the keys the catalog names, of every tenant
    served in a deployed region (a tenant served nowhere may have none yet)."""
    given = settings.tenant_keys
    if given is None:
        return
    named = {t.name: [k.name for k in t.api_keys] for t in catalog.tenants}
    for tenant, values in given.items():
        if tenant not in named:
            yield f"tenantKeys.{tenant}", "no such tenant in the catalog"
            continue
        for name, value in values.items():
            where = f"tenantKeys.{tenant}.{name}"
            if name not in named[tenant]:
                yield where, f"not one of the catalog's api_keys of {tenant}: {named[tenant]}"
            else:
                yield from ((where, p) for p in _key_problems(value.get_secret_value()))
    regions = {r.name for r in deployed}
    served = {t for m in catalog.models if regions & set(m.regions) for t in m.tenants}
    for tenant in sorted(served & set(named)):
        for name in named[tenant]:
            if name not in given.get(tenant, {}):
                yield (
                    f"tenantKeys.{tenant}.{name}",
                    "missing: the catalog names the key and the tenant serves in a deployed "
                    f"region; set it with `pulumi config set --secret --path "
                    f"'radixfleet:tenantKeys.{tenant}.{name}' \"$(openssl rand -hex 32)\"`",
                )


def _key_problems(value: str) -> Iterator[str]:
    # Never the value itself: a problem is printed.
    if len(value) < MIN_KEY_CHARS:
        yield f"too short: at least {MIN_KEY_CHARS} characters (`openssl rand -hex 32`)"
    if not KEY_CHARS.match(value):
        yield "only printable ASCII, no spaces: the key travels in an Authorization header"


def _check_kubeconfigs(settings: StackSettings, base_dir: Path) -> Iterator[Finding]:
    for region, cluster in (settings.clusters or {}).items():
        path = (base_dir / cluster.kubeconfig).resolve()
        if not path.is_file():
            yield f"clusters.{region}.kubeconfig", f"no kubeconfig file at {path}"


def _names(catalog: Catalog) -> set[str]:
    return {r.name for r in catalog.regions}


def _check_regions(settings: StackSettings, catalog: Catalog) -> Iterator[Finding]:
    wanted = settings.regions if settings.regions is not None else []
    for name, count in Counter(wanted).items():
        if count > 1:
            yield "regions", f"region {name!r} is listed {count} times"
    for i, name in enumerate(wanted):
        if name not in _names(catalog):
            yield f"regions[{i}]", f"the catalog has no region {name!r}"


def _check_aws_regions(catalog: Catalog) -> Iterator[Finding]:
    for i, region in enumerate(catalog.regions):
        if not AWS_REGION.match(region.name):
            yield "catalog", f"regions[{i}].name {region.name!r} is not an AWS region name"


def _check_failover_region(settings: StackSettings, deployed: list[Region]) -> Iterator[Finding]:
    home = settings.controllers.failover_region
    if home is not None and home not in {r.name for r in deployed}:
        yield "controllers.failoverRegion", f"{home!r} is not a deployed region"


def pool_users(catalog: Catalog, region: Region) -> dict[str, list[str]]:
    """For each GPU pool of `region`, the catalog models that can run on it there."""
    users: dict[str, list[str]] = {p.name: [] for p in region.gpu_pools}
    for model in catalog.models:
        if region.name not in model.regions:
            continue
        per_node = model.gpus_per_replica // model.nodes
        for pool in region.gpu_pools:
            if pool.gpu_type == model.gpu_type and pool.gpus_per_node >= per_node:
                users[pool.name].append(model.name)
    return users


def _check_pools(
    settings: StackSettings, catalog: Catalog, deployed: list[Region]
) -> Iterator[Finding]:
    reserved = set(settings.reserved_pools)
    for region in deployed:
        for pool, models in pool_users(catalog, region).items():
            key = f"{region.name}/{pool}"
            if not models and key not in reserved:
                yield (
                    "catalog",
                    f"GPU pool {key} is used by no catalog model: remove it, add a model that "
                    f"runs on it, or list it in {NAMESPACE}:reservedPools",
                )
            elif models and key in reserved:
                yield "reservedPools", f"{key} is not spare: {', '.join(models)} run on it"
    wanting = [f"{r.name}/{p.name}" for r in deployed for p in r.gpu_pools if p.headroom_gpus]
    if wanting and settings.pause is None:
        yield (
            "pause",
            f"GPU pools {', '.join(wanting)} keep headroom_gpus free with placeholder pods: "
            "name their pause image (image, tag, digest)",
        )
    known = {f"{r.name}/{p.name}" for r in deployed for p in r.gpu_pools}
    for i, key in enumerate(settings.reserved_pools):
        if key not in known:
            yield f"reservedPools[{i}]", f"no deployed GPU pool {key!r} (write region/pool)"


def _check_versions(settings: AwsSettings) -> Iterator[Finding]:
    for name in REQUIRED_CHARTS:
        if name not in settings.charts:
            yield f"charts.{name}", "missing: every add-on chart needs a repo and a pinned version"
    for name in sorted(set(settings.charts) - set(REQUIRED_CHARTS)):
        yield f"charts.{name}", f"unknown chart (known: {', '.join(REQUIRED_CHARTS)})"
    for name in REQUIRED_EKS_ADDONS:
        if name not in settings.cluster.addons:
            yield f"cluster.addons.{name}", "missing: every EKS add-on needs a pinned version"
    window = duration_seconds(settings.knative.stable_window)
    if not 6 <= window <= 3600:
        yield "knative.stableWindow", f"{window}s is outside Knative's 6s..1h"
    yield from _check_cluster_autoscaler(settings)


# The cluster autoscaler's minor must be the cluster's (its releases follow Kubernetes', and it
# reads the scheduler's code of that version). Its chart's appVersion, per chart version, from
# the chart's own Chart.yaml (kubernetes/autoscaler, tags cluster-autoscaler-chart-<version>).
CLUSTER_AUTOSCALER_APP_VERSIONS = {
    "9.46.6": "1.32.0",
    "9.51.0": "1.33.0",
    "9.52.1": "1.34.1",
    "9.53.0": "1.34.2",
    "9.54.1": "1.35.0",
    "9.59.0": "1.35.0",
}


def _check_cluster_autoscaler(settings: AwsSettings) -> Iterator[Finding]:
    chart = settings.charts.get("cluster-autoscaler")
    if chart is None:
        return
    app = CLUSTER_AUTOSCALER_APP_VERSIONS.get(chart.version)
    cluster = settings.cluster.kubernetes_version
    if app is None:
        known = ", ".join(CLUSTER_AUTOSCALER_APP_VERSIONS)
        yield ("charts.cluster-autoscaler.version",
               f"{chart.version}: which cluster autoscaler it runs is not known here (known: "
               f"{known}); add it to infra/settings.py from the chart's Chart.yaml")  # fmt: skip
    elif not app.startswith(f"{cluster}."):
        runs = f"{chart.version} runs cluster autoscaler {app}, not the cluster's {cluster}"
        yield "charts.cluster-autoscaler.version", runs


def _check_network(settings: AwsSettings, deployed: list[Region]) -> Iterator[Finding]:
    cidrs = settings.network.vpc_cidrs
    networks: dict[str, ipaddress.IPv4Network] = {}
    for region in deployed:
        if region.name not in cidrs:
            yield f"network.vpcCidrs.{region.name}", "missing: every region needs its VPC CIDR"
    for name, text in cidrs.items():
        try:
            network = ipaddress.IPv4Network(text)
        except ValueError as exc:
            yield f"network.vpcCidrs.{name}", str(exc)
            continue
        if not 16 <= network.prefixlen <= 18:
            yield f"network.vpcCidrs.{name}", f"{text} must be a /16, /17 or /18"
        clash = next((n for n, other in networks.items() if other.overlaps(network)), None)
        if clash is not None:
            yield f"network.vpcCidrs.{name}", f"{text} overlaps the CIDR of {clash}"
        networks[name] = network
    yield from _unknown_regions("network.vpcCidrs", cidrs, deployed)


# The most addresses a public API endpoint may be open to, all CIDRs together: a /8.
MAX_PUBLIC_API_ADDRESSES = 2**24


def _check_endpoint(settings: AwsSettings) -> Iterator[Finding]:
    cluster = settings.cluster
    if cluster.private_endpoint:
        return
    if not cluster.public_access_cidrs:
        yield (
            "cluster.publicAccessCidrs",
            "a public API endpoint needs the CIDRs allowed to reach it (or privateEndpoint: true)",
        )
    networks = []
    for i, cidr in enumerate(cluster.public_access_cidrs):
        try:
            networks.append(ipaddress.IPv4Network(cidr))
        except ValueError as exc:
            yield f"cluster.publicAccessCidrs[{i}]", str(exc)
    # Judged together: 0.0.0.0/1 and 128.0.0.0/1 are the whole internet as much as 0.0.0.0/0.
    opened = sum(n.num_addresses for n in ipaddress.collapse_addresses(networks))
    if opened > MAX_PUBLIC_API_ADDRESSES:
        whole = " (the whole internet)" if opened == 2**32 else ""
        yield (
            "cluster.publicAccessCidrs",
            (
                f"together they open the API to {opened:,} addresses{whole}, more than a /8: "
                "list the ranges you run pulumi and kubectl from"
            ),
        )


def _check_model_store(settings: AwsSettings, deployed: list[Region]) -> Iterator[Finding]:
    store = settings.model_store
    names = [r.name for r in deployed]
    if store.primary_region is not None and store.primary_region not in names:
        yield "modelStore.primaryRegion", f"{store.primary_region!r} is not a deployed region"
    for name in names:
        bucket = f"{store.bucket}-{name}"
        if not BUCKET.match(bucket) or "--" in bucket:
            yield "modelStore.bucket", f"{bucket!r} (the {name} bucket) is not a valid S3 name"


def _check_dns(settings: AwsSettings, deployed: list[Region]) -> Iterator[Finding]:
    yield from _unknown_regions("dns.weights", settings.dns.weights, deployed)
    if not settings.dns.health_check_path.startswith("/"):
        yield "dns.healthCheckPath", "must start with '/'"


def _unknown_regions(
    key: str, values: Mapping[str, object], deployed: list[Region]
) -> Iterator[Finding]:
    names = {r.name for r in deployed}
    for name in values:
        if name not in names:
            yield f"{key}.{name}", f"{name!r} is not a deployed region"
