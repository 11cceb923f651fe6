"""Pulumi components of the fleet: a cloud-neutral regional interface, AWS implementations of it,
the global AWS pieces (model store, DNS) and the Kubernetes layer every cloud shares.
"""
