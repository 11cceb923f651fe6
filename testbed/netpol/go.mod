// Kubernetes SIG Network's kube-network-policies (sigs.k8s.io/kube-network-policies/cmd), built by
// exact version to enforce NetworkPolicies in the test cluster. GoBuild builds the upstream
// package path directly, so this module has no Go files of its own: do not run `go mod tidy`
// here (with nothing importing it, the requirement would be dropped). nfqueue_xt.go.in is added
// to the upstream package at build time (testbed/builds.py says why).
module github.com/radixfleet/radixfleet/testbed/netpol

go 1.23.0

require sigs.k8s.io/kube-network-policies v0.8.0
