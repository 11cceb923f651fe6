"""Every Go program the test bed builds, and a command that builds them all.

``python3 -m testbed.builds [NAME...]``; ``--prefetch NAME...`` only downloads their modules.

Standard library only: ``scripts/provision.sh`` runs it before the project's environment exists.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from testbed.gobuild import Addition, BuildError, Edit, GoBuild, ensure_built, prefetch

HERE = Path(__file__).resolve().parent
KUBE_VERSION = "v1.35.4"


def _kube_ldflags(version: str) -> str:
    # Without these the components report v0.0.0-master, which kubectl and the kubelet's
    # version skew checks cannot parse; -s -w drop debug symbols (half the size and link time).
    major, minor = version.removeprefix("v").split(".")[:2]
    pkg = "k8s.io/component-base/version"
    return (
        f"-s -w -X {pkg}.gitVersion={version} -X {pkg}.gitMajor={major} "
        f"-X {pkg}.gitMinor={minor} -X {pkg}.gitTreeState=clean"
    )


# kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy and kubectl in
# one multi-call binary (testbed/kube/main.go): they share most of their packages.
KUBE = GoBuild(
    name="kube",
    source_dir=HERE / "kube",
    mains=(("kube", "."),),
    ldflags=_kube_ldflags(KUBE_VERSION),
)

# CoreDNS with the plugins a cluster's DNS uses (testbed/coredns/main.go).
COREDNS = GoBuild(name="coredns", source_dir=HERE / "coredns", mains=(("coredns", "."),))

# KServe's controller manager: the one KServe program that Standard (raw Deployment) and
# Serverless (Knative) InferenceServices need. The agent and router serve features we do not
# use (request logging and batching, InferenceGraph); the local model cache's are below.
# v0.20.0 is the newest KServe release the module proxy serves here (v0.21.0 answers 403).
# Cold (empty GOCACHE), on two cores shared with a Kubernetes build: 21 min wall, 462 s user +
# 88 s system CPU, 1.3 GB peak RSS; an 83 MB binary.
KSERVE = GoBuild(
    name="kserve",
    source_dir=HERE / "kserve",
    mains=(("manager", "github.com/kserve/kserve/cmd/manager"),),
)

# KServe's local model cache: its controller and its node agent, from the same module (Go's
# build cache compiles once what they share with the manager). Built apart so that the
# manager's own build stays where it is cached.
KSERVE_LOCALMODEL = GoBuild(
    name="kserve-localmodel",
    source_dir=HERE / "kserve",
    mains=(
        ("localmodel", "github.com/kserve/kserve/cmd/localmodel"),
        ("localmodelnode", "github.com/kserve/kserve/cmd/localmodelnode"),
    ),
)

# kube-rbac-proxy v0.18.0 (github.com/brancz/kube-rbac-proxy), the image KServe's chart runs
# beside the controller manager, in front of its metrics port.
KUBE_RBAC_PROXY = GoBuild(
    name="kube-rbac-proxy",
    source_dir=HERE / "kube-rbac-proxy",
    mains=(("kube-rbac-proxy", "github.com/brancz/kube-rbac-proxy/cmd/kube-rbac-proxy"),),
    ldflags="-s -w",
)

# Knative Serving 1.21.1 (knative.dev/serving v0.48.1, the version KServe v0.20.0 requires):
# the programs of its release manifests (serving-hpa.yaml runs autoscaler-hpa; cleanup is one
# of the Jobs the operator runs after an install) built one after another; Go's build cache
# compiles the packages they share once.
# Cold, on the same shared cores: 25 min wall (the controller 22 min, the four others 3 min
# together), 407 s user + 84 s system CPU, 1.1 GB peak RSS; 281 MB of binaries (queue 29 MB).
KNATIVE_COMMANDS = ("controller", "webhook", "autoscaler", "activator", "queue", "autoscaler-hpa")
KNATIVE = GoBuild(
    name="knative",
    source_dir=HERE / "knative",
    mains=(
        *((name, f"knative.dev/serving/cmd/{name}") for name in KNATIVE_COMMANDS),
        ("cleanup", "knative.dev/serving/pkg/cleanup/cmd/cleanup"),
    ),
)

# The Knative operator v1.21.1 (knative.dev/operator v0.48.1), which infra's Helm chart runs and
# which installs Knative Serving from the release manifests its image carries (``kodata``), and
# knative.dev/pkg's storage-version migration, the Job it runs after installing Serving. Its own
# module (testbed/knative-operator) so that its requirements never change Serving's build; the
# two share their Kubernetes and Knative libraries at the same versions, compiled once.
KNATIVE_OPERATOR_MODULE = "knative.dev/operator"
KNATIVE_OPERATOR = GoBuild(
    name="knative-operator",
    source_dir=HERE / "knative-operator",
    mains=(
        ("operator", f"{KNATIVE_OPERATOR_MODULE}/cmd/operator"),
        ("webhook", f"{KNATIVE_OPERATOR_MODULE}/cmd/webhook"),
        ("migrate", "knative.dev/pkg/apiextensions/storageversion/cmd/migrate"),
    ),
)

# Kubernetes SIG Network's NetworkPolicy enforcer (sigs.k8s.io/kube-network-policies v0.8.0, the
# newest the module proxy serves here), so that the test cluster enforces the NetworkPolicies
# radixfleet renders. It judges each new connection in user space, where nftables hands it
# through a queue; its "queue" statement needs the kernel's nft_queue, which this machine's
# kernel lacks (`# CONFIG_NFT_QUEUE is not set` in /proc/config.gz), while it has xt_NFQUEUE
# (CONFIG_NETFILTER_XT_TARGET_NFQUEUE=y) and nft_compat. One edit, test bed only: its two
# queue statements become the xtables NFQUEUE target (testbed/netpol/nfqueue_xt.go.in); the
# rules, the sets and the policy evaluation are upstream's. The DNS race workaround also queues
# with the statement; kernels from 6.12 on do not need it and the test bed turns it off.
# Cold (empty module and build caches), on an otherwise idle machine: 108 s wall, 162 s user +
# 38 s system CPU, 0.86 GB peak RSS; a 53 MB binary.
NETPOL_MODULE = "sigs.k8s.io/kube-network-policies"
NETPOL_QUEUE = """	queue := &expr.Queue{Num: uint16(c.config.QueueID)}
	if c.config.FailOpen {
		queue.Flag = expr.QueueFlagBypass
	}
"""
NETPOL = GoBuild(
    name="netpol",
    source_dir=HERE / "netpol",
    mains=(("kube-network-policies", f"{NETPOL_MODULE}/cmd"),),
    edits=(
        Edit(
            module=NETPOL_MODULE,
            file="pkg/networkpolicy/controller.go",
            old=NETPOL_QUEUE,
            new="\tqueue := nfqueueTarget(c.config.QueueID, c.config.FailOpen)\n",
            count=2,
        ),
    ),
    additions=(
        Addition(
            module=NETPOL_MODULE,
            file="pkg/networkpolicy/zz_nfqueue_xt.go",
            source="nfqueue_xt.go.in",
        ),
    ),
)

# Helm v3.22.0 (helm.sh/helm/v3), the Helm that pulumi-kubernetes' Release embeds a v3 of: the
# tests render the charts infra installs (KServe's ship inside its Go module) with infra's
# values, and see what the chart really makes of them (testbed/charts.py). Cold (empty build
# cache, modules downloaded), on two cores shared with a test run: 176 s wall, 244 s user +
# 48 s system CPU; a 60 MB binary.
HELM_VERSION = "v3.22.0"
# As Helm's own Makefile builds a release: its version, and the Kubernetes version charts see
# when none is given (that of the client-go it requires, v0.37; else 1.20).
HELM_LDFLAGS = " ".join([
    "-s -w",
    f"-X helm.sh/helm/v3/internal/version.version={HELM_VERSION}",
    *(f"-X helm.sh/helm/v3/pkg/{pkg}.k8sVersion{part}={value}"
      for pkg in ("chartutil", "lint/rules") for part, value in (("Major", "1"), ("Minor", "37"))),
])  # fmt: skip
HELM = GoBuild(
    name="helm",
    source_dir=HERE / "helm",
    mains=(("helm", "helm.sh/helm/v3/cmd/helm"),),
    ldflags=HELM_LDFLAGS,
)

# The Pulumi CLI v3.274.1 (github.com/pulumi/pulumi/pkg/v3/cmd/pulumi): no prebuilt Pulumi can
# be downloaded here. The tests run the Pulumi program's Kubernetes half with it, as an inline
# program of the Automation API: our own process serves the Python language runtime, so the
# language host (sdk/python/cmd/pulumi-language-python, not served by the proxy) is not needed.
# Without its version stamp `pulumi version` prints nothing and the Automation API refuses it.
PULUMI_VERSION = "v3.274.1"
PULUMI = GoBuild(
    name="pulumi",
    source_dir=HERE / "pulumi",
    mains=(("pulumi", "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi"),),
    ldflags=f"-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version={PULUMI_VERSION}",
)

# pulumi-kubernetes' provider plugin (pulumi-resource-kubernetes), the one the Pulumi program's
# Kubernetes resources and Helm releases run through. The proxy serves its module only at a
# pseudo-version (provider 4.24, by the sdk/v4 it requires). Its main embeds two files that
# upstream's `go generate` writes from two the module ships (the schema and the Terraform
# mapping, re-serialised); the build copies them as they are, which is the same JSON. Its
# go.mod replaces sdk/v4 by a sibling folder the module zip lacks: the copy drops that line.
PULUMI_KUBERNETES_MODULE = "github.com/pulumi/pulumi-kubernetes/provider/v4"
PULUMI_KUBERNETES_VERSION = "4.24.0"
_PROVIDER_MAIN = "cmd/pulumi-resource-kubernetes"
PULUMI_KUBERNETES = GoBuild(
    name="pulumi-kubernetes",
    source_dir=HERE / "pulumi-kubernetes",
    mains=(("pulumi-resource-kubernetes", f"{PULUMI_KUBERNETES_MODULE}/{_PROVIDER_MAIN}"),),
    ldflags=(
        f"-s -w -X {PULUMI_KUBERNETES_MODULE}/pkg/version.Version={PULUMI_KUBERNETES_VERSION}"
    ),
    edits=(
        Edit(
            module=PULUMI_KUBERNETES_MODULE,
            file="go.mod",
            old="replace github.com/pulumi/pulumi-kubernetes/sdk/v4 => ../sdk\n",
            new="",
        ),
    ),
    additions=tuple(
        Addition(
            module=PULUMI_KUBERNETES_MODULE,
            file=f"{_PROVIDER_MAIN}/{name}-embed.json",
            source=f"{_PROVIDER_MAIN}/{name}.json",
            from_module=True,
        )
        for name in ("schema", "terraform-mapping")
    ),
)

# prometheus-operator v0.82.2 (the release kube-prometheus-stack 72.9.1, infra's pin, runs), its
# config reloader, and the Prometheus server v3.5.0 (github.com/prometheus/prometheus v0.305.0),
# so that the test cluster's PodMonitors and PrometheusRules are served as on infra's clusters
# (Debian's Prometheus has no Kubernetes service discovery). One edit, test bed only: Prometheus'
# main registers the Kubernetes discovery alone instead of its plugins package, which imports
# every cloud's discovery (and their SDKs: a much longer build for nothing the test bed uses).
PROMETHEUS_OPERATOR = GoBuild(
    name="prometheus-operator",
    source_dir=HERE / "prometheus-operator",
    mains=(
        ("prometheus", "github.com/prometheus/prometheus/cmd/prometheus"),
        ("operator", "github.com/prometheus-operator/prometheus-operator/cmd/operator"),
        (
            "prometheus-config-reloader",
            "github.com/prometheus-operator/prometheus-operator/cmd/prometheus-config-reloader",
        ),
    ),
    edits=(
        Edit(
            module="github.com/prometheus/prometheus",
            file="cmd/prometheus/main.go",
            old='\t_ "github.com/prometheus/prometheus/plugins" // Register plugins.\n',
            new='\t_ "github.com/prometheus/prometheus/discovery/kubernetes" // Kubernetes only.\n',
        ),
    ),
)

ALL: tuple[GoBuild, ...] = (
    KUBE, COREDNS, KSERVE, KSERVE_LOCALMODEL, KUBE_RBAC_PROXY, KNATIVE, KNATIVE_OPERATOR, NETPOL,
    HELM, PULUMI, PULUMI_KUBERNETES, PROMETHEUS_OPERATOR,
)  # fmt: skip


def main(argv: list[str]) -> int:
    only_download = argv[:1] == ["--prefetch"]
    by_name = {build.name: build for build in ALL}
    names = argv[only_download:] or list(by_name)
    unknown = [name for name in names if name not in by_name]
    if unknown:
        print(f"testbed build: unknown {unknown}; known: {', '.join(by_name)}", file=sys.stderr)
        return 2
    for build in (by_name[name] for name in names):  # in the order given
        if only_download:
            prefetch(build)
            continue
        started = time.monotonic()
        try:
            folder = ensure_built(build)
        except BuildError as error:
            print(f"testbed build: {error}", file=sys.stderr)
            return 1
        print(f"testbed build: {build.name} at {folder} ({time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
