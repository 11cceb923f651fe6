"""The autoscaler: scale each model on SGLang's saturation signals, down to zero and back.

`spec` (the AutoscalePolicy type), `state` (observation and status), `decide` (the pure
policy, over `memory`, `demand`, `sizing` and `victims`), `queries`/`observe` (Prometheus and
Kubernetes in), `kube`/`controller` (acting through Knative revision annotations and pod
deletion costs, kopf handlers), `twin` (the same decision in the fleet twin). README.md says
what Knative lets us control and how.
"""
