"""KServe on the test cluster, installed as infra installs it: KServe's own Helm charts, at the
version infra pins, with the values infra passes (``infra.manifests``), as the releases infra
names. Only what this machine makes different changes (``tests/testbed/test_kserve.py`` holds
every other value equal to infra's):

- every image is one built here (no registry can be reached), named by the repository and tag
  it was imported under and pulled ``IfNotPresent``; images nobody built (KServe's agent and
  router, the ART explainer) get a ``localhost/`` name, so a pod that needs one fails to start
  instead of reaching a registry;
- the node agent keeps models in a folder of the run's (``host_path``) instead of the node's
  ``/models``: the test node is this machine. KServe's chart takes no value for it (its
  ``localmodel.agent.hostPath`` is documented but unused), so Helm's post-renderer sets it
  (``testbed/helm_post_render.py``).

The certificates the charts ask cert-manager for come from ``testbed.certificates``. Deciding
the releases is pure; ``testbed.session`` installs them.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra import manifests
from radixfleet.platform import KSERVE_NAMESPACE
from testbed.charts import ModuleChart, kserve_chart

Obj = dict[str, Any]

NAMESPACE = KSERVE_NAMESPACE  # where infra installs KServe's releases
CONTROLLER = "kserve-controller-manager"
LOCALMODEL_CONTROLLER = "kserve-localmodel-controller-manager"
LOCALMODEL_AGENT = "kserve-localmodelnode-agent"
LOCALMODEL_JOBS = manifests.MODEL_CACHE_JOBS
LOCALMODEL_RELEASE = "kserve-localmodel-resources"
# infra gives KServe its region's domain, `<region>.<fleet domain>`; nothing routes by it here.
DOMAIN = "test-bed.models.example.com"
# The images the test bed builds, by the keys `releases` and `local_model_release` take.
MANAGER, RBAC_PROXY, STORAGE_INITIALIZER = "manager", "rbac-proxy", "storage-initializer"
LOCALMODEL_IMAGES = ("localmodel-controller", "localmodel-agent")
NOT_BUILT_TAG = "v0.20.0"


@dataclass(frozen=True)
class Release:
    """A Helm release of one of KServe's charts: infra's name for it, and its values."""

    name: str
    values: Obj

    @property
    def chart(self) -> ModuleChart:
        return kserve_chart(self.name)  # infra names each release after its chart


def releases(images: Mapping[str, str]) -> list[Release]:
    """KServe's releases in install order, as infra installs them in a region whose GPU nodes
    cache weights: the CRDs, the local model cache's CRDs, then the controller."""
    infra_values = manifests.kserve_values(domain=DOMAIN, model_cache=True)
    return [
        Release("kserve-crd", {}),
        Release("kserve-localmodel-crd", {}),
        Release("kserve-resources", merged(infra_values, kserve_images(images))),
    ]


def local_model_release(images: Mapping[str, str]) -> Release:
    """KServe's local model controller and node agent, with infra's values."""
    return Release(
        LOCALMODEL_RELEASE,
        merged(manifests.kserve_localmodel_values(), localmodel_images(images)),
    )


def kserve_images(images: Mapping[str, str]) -> Obj:
    """The values that point KServe's chart at the images built here."""
    manager_repo, manager_tag = split(images[MANAGER])
    storage_repo, storage_tag = split(images[STORAGE_INITIALIZER])
    missing = {key: {"image": f"localhost/radixfleet/not-built/{key}", "tag": NOT_BUILT_TAG}
               for key in ("agent", "router")}  # fmt: skip
    return {"kserve": {
        "controller": {"image": manager_repo, "tag": manager_tag,
                       "imagePullPolicy": "IfNotPresent", "rbacProxyImage": images[RBAC_PROXY]},
        "storage": {"image": storage_repo, "tag": storage_tag},
        "localmodel": {"defaultJobImage": storage_repo, "defaultJobTag": storage_tag},
        "servingruntime": {"art": {"image": "localhost/radixfleet/not-built/art-explainer",
                                   "defaultVersion": NOT_BUILT_TAG}},
        **missing,
    }}  # fmt: skip


def localmodel_images(images: Mapping[str, str]) -> Obj:
    controller, agent = (split(images[key]) for key in LOCALMODEL_IMAGES)
    return {"kserve": {
        "localmodel": {"controller": {"image": controller[0], "tag": controller[1]}},
        "localmodelnode": {"controller": {"image": agent[0], "tag": agent[1]}},
    }}  # fmt: skip


def post_render_argv(host_path: Path) -> list[str]:
    """Helm's post-renderer for the local model release: the agent's folder at ``host_path``."""
    script = Path(__file__).resolve().parent / "helm_post_render.py"
    return [sys.executable, str(script), "host-path", LOCALMODEL_AGENT, "models", str(host_path)]


def split(reference: str) -> tuple[str, str]:
    """``repo:tag`` -> (repo, tag), as KServe's chart spells an image in two values."""
    repository, colon, tag = reference.rpartition(":")
    if not colon or "/" in tag or "@" in reference:
        raise ValueError(f"not a repository:tag image reference: {reference}")
    return repository, tag


def merged(base: Mapping[str, Any], changes: Mapping[str, Any]) -> Obj:
    """``base`` with ``changes`` merged in, maps key by key (as Helm merges values)."""
    out = copy.deepcopy(dict(base))
    for key, value in changes.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out
