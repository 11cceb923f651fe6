"""The controller kit: what every radixfleet controller shares, owned by none of them.

Kubernetes errors that keep their HTTP status (`errors`), the Events port (`events`), the status
wire format and base types (`wire`), RBAC rules as data (`rbac`), the plug-in a controller
package exposes and the registry that lists them (`plugin`, `registry`), the options a plug-in
owns as data (`settings`) and the commands built from them (`commands`, `cli`: every `run`,
`radixfleet operator run`, the status helpers); on the client side the Kubernetes calls, the one
status writer and the Events adapter (`kube`), the kopf glue with the one retry and 409 rule
(`kopfglue`), per-controller metrics (`metrics`) and leader election (`leader`). Like kopf's
`_kits` under `_core`, the kit sits below every controller (an import-linter `layers` contract
says so); nothing here imports a controller package.

Importing this package imports nothing else: the pure modules stay usable by the twin.
"""
