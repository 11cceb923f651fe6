// The Knative operator (its operator and webhook programs), the way infra installs Knative
// Serving: its Helm chart runs them, and a KnativeServing asks the operator for Serving at the
// version infra pins. Built from knative.dev/operator/cmd/* by exact version, with
// knative.dev/pkg's storage-version migration (the Job the operator runs after an install) from
// the version the operator requires. GoBuild builds the upstream package paths directly, so this
// module has no Go files of its own: do not run `go mod tidy` here. knative.dev/operator v0.48.1
// is operator release knative-v1.21.1 (the chart version infra pins), and it requires the same
// knative.dev/serving v0.48.1 and Kubernetes libraries as testbed/knative, so Go's build cache
// compiles their shared packages once. The checksum database reachable here does not answer for
// knative.dev/eventing v0.48.0 (404), so its two go.sum lines are the operator's own go.sum's,
// which the database vouches for through the operator's module.
module github.com/radixfleet/radixfleet/testbed/knative-operator

go 1.24.0

require knative.dev/operator v0.48.1

require knative.dev/pkg v0.0.0-20260120122510-4a022ed9999a // indirect
