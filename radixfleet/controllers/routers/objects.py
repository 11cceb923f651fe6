"""The routers' objects in a catalog's manifests: in every namespace that serves a model, the
service account its routers run as, allowed to read the pods there for smg's discovery and
nothing else (`radixfleet render` and `pulumi up` both write them, through
`radixfleet.kit.registry.catalog_objects`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from radixfleet.config.catalog import Catalog
from radixfleet.config.serving import Served, namespace_of
from radixfleet.controllers.routers.manifests import access


def catalog_objects(catalog: Catalog, served: Iterable[Served]) -> list[dict[str, Any]]:
    """The routers' ServiceAccount, Role and RoleBinding in each namespace of `served`."""
    del catalog  # a namespace needs routers only where a model is served
    namespaces = sorted({namespace_of(tenant) for _, tenant in served})
    return [obj for namespace in namespaces for obj in access(namespace)]
