"""Regional failover: judge regions by serving SLOs, shift Route 53 weights, fail back slowly.

- `spec`: the FailoverPolicy type (its CRD generated from it by `crd`);
- `state`: the observed signals and the policy's status;
- `decide`: the whole policy as a pure function (no I/O, no clock);
- `queries`, `observe`: each region's signals from its Prometheus and Route 53;
- `ports`, `kube`, `fakes`: the Kubernetes side (policy status, Events, model floors);
- `controller`: the act layer and the kopf handlers.
"""
