"""The test bed: a real one-node Kubernetes with KServe and Knative, built and run on this machine.

Everything here is built from source by exact version (the Go module proxy, Debian's packages, our
own wheels), because no container registry can be reached: the Kubernetes components, the images
the cluster runs, and the cluster's bring-up and teardown. ``make cluster`` runs one for humans;
the ``cluster`` pytest fixture runs one per test session.
"""
