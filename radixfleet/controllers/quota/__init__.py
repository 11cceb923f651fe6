"""The quota controller: tenants' GPU budgets (admission, ResourceQuotas) and token-rate budgets.

- `spec`: the Tenant custom resource as a type.
- `decide`: the whole GPU policy, pure: borrowing, admission, quota split, status.
- `admission`: the ValidatingAdmissionPolicy that carries `decide.admit` into the API server.
- `ledger`: token buckets per tenant and model, pure; `gate` puts them on the request path.
- `controller`: the act layer and kopf handlers; `ports`, `kube`, `fakes`: its Kubernetes side.
"""
