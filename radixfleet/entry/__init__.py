"""The region entry as it runs in a cluster: tenants' requests to their models' routers."""

# How long a stopping entry (SIGTERM) lets the answers under way finish: it has stopped
# accepting, the Service no longer lists it. The pod's grace period is longer (render/entry.py).
DRAIN_S = 90
