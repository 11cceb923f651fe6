"""The controllers, one package each (canary, autoscale, quota, failover, routers): a pure
`decide`, its adapters, its plug-in (`plugin.py`, listed by `radixfleet.kit.registry`) and the
objects it owns. None imports another; the kernel reaches them only through the registry."""
