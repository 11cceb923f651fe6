"""radixfleet's Pulumi program: per region a VPC, an EKS cluster, GPU node pools and add-ons;
globally the model store and the Route 53 records.

`infra/` is a package so that tests, benchmarks and mypy import the program like any other code;
Pulumi runs `infra/__main__.py`, which only reads the stack config and wires the components.
"""
