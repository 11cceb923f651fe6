"""The schemas `radixfleet validate` checks against, and the one set of versions they come from.

Infra pins the same versions (`infra/Pulumi.example.yaml`; a test holds them equal), so what
validate accepts is what the cluster `pulumi up` builds runs. PROVENANCE.md says where each
file was copied from.
"""

# KServe release the CRDs in kserve/ come from (Go module github.com/kserve/kserve).
KSERVE_VERSION = "v0.20.0"
# Knative Serving release KServe KSERVE_VERSION is built and tested with: its go.mod requires
# knative.dev/serving v0.48.1, and its kserve-deps.env installs Knative Serving 1.21.1 with the
# Knative operator v1.21.1. Knative's Go modules are numbered v0.(minor + 27): 1.21 = v0.48.
KNATIVE_SERVING_VERSION = "1.21.1"
KNATIVE_SERVING_MODULE_VERSION = "v0.48.1"
# prometheus-operator release whose PodMonitor CRD is in prometheus/: kube-prometheus-stack,
# which infra installs, deploys the v0.82 line from chart 71.0.0 on, and chart
# KUBE_PROMETHEUS_STACK_VERSION with it; a chart bump means copying the CRD again.
PROMETHEUS_OPERATOR_VERSION = "v0.82.2"
KUBE_PROMETHEUS_STACK_VERSION = "72.9.1"
