"""The region entry as it runs in a cluster: tenants' requests to their models' routers."""
