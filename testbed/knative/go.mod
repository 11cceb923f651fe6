// The programs of Knative Serving's release manifests (controller, webhook, autoscaler, activator,
// queue-proxy, autoscaler-hpa, the cleanup Job), built from knative.dev/serving by exact version.
// GoBuild builds the upstream package paths directly, so this module has no Go files of its own: do
// not run `go mod tidy` here (with nothing importing Knative it would drop the requirement).
// knative.dev/serving v0.48.1 is Knative Serving 1.21.1 (the module tag v0.N sits on the commit of
// release knative-v1.(N-27)), the version that KServe v0.20.0's go.mod requires; it has no replace
// directives of its own.
module github.com/radixfleet/radixfleet/testbed/knative

go 1.24.0

require knative.dev/serving v0.48.1
