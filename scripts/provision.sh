#!/usr/bin/env bash
# Install the machine packages the tests start for real: etcd (API server storage), Prometheus
# (metrics queries, promtool), Chromium (report pages), and what builds and runs the test bed's
# images (mmdebstrap, buildah, skopeo, umoci, runc, containerd, a static C toolchain).
# Idempotent: a no-op when present.
set -euo pipefail
need=()
command -v etcd >/dev/null || need+=(etcd-server)
command -v prometheus >/dev/null || need+=(prometheus)
command -v chromium >/dev/null || need+=(chromium)
for tool in mmdebstrap buildah skopeo umoci runc containerd iptables conntrack; do
  command -v "$tool" >/dev/null || need+=("$tool")
done
# nft: the NetworkPolicy enforcer's tests read its rules in the node (testbed/netpol.py).
command -v nft >/dev/null || need+=(nftables)
# The test cluster's pod network: the bridge, host-local and portmap CNI plugins.
[ -x /usr/lib/cni/bridge ] || need+=(containernetworking-plugins)
command -v gcc >/dev/null || need+=(gcc libc6-dev)
if ((${#need[@]})); then
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${need[@]}" >/dev/null
fi

cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
command -v go >/dev/null || { echo "provision: Go is needed to build the test cluster" >&2; exit 1; }

cache="${XDG_CACHE_HOME:-$HOME/.cache}/radixfleet"
mkdir -p "$cache"
programs=(kube coredns kserve kserve-localmodel kube-rbac-proxy knative knative-operator netpol
  helm prometheus-operator)

# Download the cluster builds' Go modules in the background: mostly network wait and unzipping,
# which then overlaps the compiles below instead of preceding each. In the reverse of their build
# order, so that it stays ahead of the build it feeds rather than racing it for the same modules.
# Not the Pulumi builds' (below): at normal priority their unzipping competes with the cluster
# builds, and their own idle-priority build fetches them in time. A no-op for what
# is built. Its log: ~/.cache/radixfleet/prefetch.log.
python3 -m testbed.builds --prefetch prometheus-operator helm netpol knative-operator knative \
  kube-rbac-proxy kserve-localmodel kserve coredns >"$cache/prefetch.log" 2>&1 </dev/null &

# The Pulumi CLI and pulumi-kubernetes' provider (testbed/builds.py), which only
# tests/cluster/test_pulumi.py needs, late in the run: built in the background at idle CPU
# priority (SCHED_IDLE: on cycles nothing else wants), so that a cold machine builds them while
# the other builds download and while the tests wait on the cluster, not before them. The test
# waits for them (each build holds a lock while it runs). About 20 CPU-minutes cold; warm, a
# no-op. Its log: ~/.cache/radixfleet/pulumi-build.log.
nohup chrt --idle 0 python3 -m testbed.builds pulumi pulumi-kubernetes \
  >"$cache/pulumi-build.log" 2>&1 </dev/null &

# Build the test bed's images (testbed/images/: Debian base, pause, radixfleet, smg, KServe's
# storage-initializer), cached by their inputs under ~/.cache/radixfleet/images, beside the Go
# builds: none needs the other, and much of an image build is waiting on Debian's and Python's
# package servers. Minutes the first time, a no-op after.
python3 -m testbed.images &
images=$!

# Build the test cluster's Go programs (testbed/builds.py: Kubernetes 1.35 as one multi-call
# binary, CoreDNS, KServe's manager and its local model cache's two programs, the
# kube-rbac-proxy KServe's chart runs beside its manager, Knative Serving's programs and the
# Knative operator's, the NetworkPolicy enforcer, Helm, prometheus-operator with Prometheus), cached by source hash under ~/.cache/radixfleet/go: cold,
# Kubernetes alone takes 10-20 minutes on two cores; a warm run is a no-op.
python3 -m testbed.builds "${programs[@]}"
wait "$images"
