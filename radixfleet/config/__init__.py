"""Typed fleet configuration: regions with GPU pools, tenants and the model catalog.

One source of truth for names, GPU pools and labels: the catalog renderer, the Pulumi program and
the controllers all read the fleet through these types.
"""

from radixfleet.config.catalog import (
    Capacity,
    Catalog,
    GpuPool,
    KvCache,
    LoraAdapter,
    Model,
    ModelArchitecture,
    Region,
    Slo,
    Tenant,
)
from radixfleet.config.errors import ConfigError, Problem
from radixfleet.config.load import load_catalog, parse_catalog

__all__ = [
    "Capacity",
    "Catalog",
    "ConfigError",
    "GpuPool",
    "KvCache",
    "LoraAdapter",
    "Model",
    "ModelArchitecture",
    "Problem",
    "Region",
    "Slo",
    "Tenant",
    "load_catalog",
    "parse_catalog",
]
