// The KServe controller manager (github.com/kserve/kserve/cmd/manager), built by exact version.
// GoBuild builds the upstream package path directly, so this module has no Go files of its own:
// do not run `go mod tidy` here (with nothing importing KServe it would drop the requirement).
// KServe's own replace directives are copied below: a dependency's replaces do not apply to the
// module that requires it, and without them the build resolves k8s.io/* and controller-runtime
// to versions KServe does not compile against.
module github.com/radixfleet/radixfleet/testbed/kserve

go 1.25.8

require github.com/kserve/kserve v0.20.0

replace sigs.k8s.io/controller-runtime => sigs.k8s.io/controller-runtime v0.22.5

replace (
	k8s.io/api => k8s.io/api v0.34.5
	k8s.io/apiextensions-apiserver => k8s.io/apiextensions-apiserver v0.34.3
	k8s.io/apimachinery => k8s.io/apimachinery v0.34.5
	k8s.io/apiserver => k8s.io/apiserver v0.34.3
	k8s.io/client-go => k8s.io/client-go v0.34.5
	k8s.io/code-generator => k8s.io/code-generator v0.34.3
	k8s.io/component-base => k8s.io/component-base v0.34.3
	k8s.io/component-helpers => k8s.io/component-helpers v0.34.3
)

replace github.com/expr-lang/expr => github.com/expr-lang/expr v1.17.7

replace google.golang.org/grpc => google.golang.org/grpc v1.79.3

replace github.com/lyft/protoc-gen-validate => github.com/envoyproxy/protoc-gen-validate v1.0.4
