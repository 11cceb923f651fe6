// cert-manager's CRDs (deploy/crds of github.com/cert-manager/cert-manager), at the version of the
// chart infra installs. Nothing is built from this module: cert-manager's commands are modules of
// their own (cmd/controller, cmd/webhook, cmd/cainjector) that the Go module proxy does not serve,
// so the test bed issues the certificates its Certificates ask for itself (testbed/certificates.py).
module github.com/radixfleet/radixfleet/testbed/cert-manager

go 1.26.0

require github.com/cert-manager/cert-manager v1.21.2
