"""Knative Serving on the test cluster, installed as infra installs it: the Knative operator from
its own Helm chart, at the release infra pins and with infra's values, then infra's
``KnativeServing`` (``infra.manifests.knative_serving``), from which the operator installs Serving
1.21.1 out of the release manifests its image carries. Only what this machine makes different
changes (``tests/testbed/test_knative.py`` holds everything else equal to infra's):

- every image is one built here (no registry can be reached): the chart's two by its values,
  Serving's through the KnativeServing's ``registry.override``, the operator's documented way to
  install from a private registry, and the queue-proxy sidecar's in ``config-deployment``;
- Knative skips tag-to-digest resolution for ``localhost/`` images (it would ask a registry);
- Kourier, the networking layer infra enables, runs Envoy, which cannot be built here: the
  KnativeServing leaves it disabled (so the operator installs no Kourier; its gateway's HPA
  keeps at least one replica, which no override can scale to zero) and keeps infra's Kourier
  ingress class, whose KIngresses ``testbed/fake_kingress.py`` marks ready in Kourier's stead;
- the Knative features are the caller's (infra's, ``radixfleet/platform.py``, unless a test
  audits others).

The chart's ``Chart.yaml`` and ``values.yaml`` hold placeholders that the operator's release
script (``hack/generate-helm.sh``) fills with the release's version before it publishes the
chart; ``operator_chart`` fills them the same way. Deciding what to install is pure;
``testbed.session`` installs it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from infra import manifests
from infra.settings import KnativeSettings
from testbed.charts import ModuleChart
from testbed.kserve import DOMAIN, merged, split

Obj = dict[str, Any]

HERE = Path(__file__).resolve().parent
OPERATOR_MODULE = "knative.dev/operator"
OPERATOR_GO_MOD = HERE / "knative-operator" / "go.mod"
NAMESPACE = manifests.KNATIVE_NAMESPACE
OPERATOR_NAMESPACE = OPERATOR_RELEASE = manifests.KNATIVE_OPERATOR
# Serving's Deployments (the queue-proxy is a sidecar of each revision's pods), and the
# operator chart's.
DEPLOYMENTS = ("controller", "webhook", "autoscaler", "activator", "autoscaler-hpa")
OPERATOR_DEPLOYMENTS = ("knative-operator", "operator-webhook")
# The programs built here: Serving's (testbed.builds.KNATIVE; cleanup is a post-install Job's),
# and the operator's two with knative.dev/pkg's storage-version migration, the other Job's
# (testbed.builds.KNATIVE_OPERATOR).
SERVING_COMMANDS = (*DEPLOYMENTS, "queue", "cleanup")
OPERATOR_COMMANDS = ("operator", "webhook", "migrate")
# Knative resolves image tags to digests by asking the registry, except for these registries.
SKIP_TAG_RESOLVING = "kind.local,ko.local,dev.local,localhost"
# Where ko images carry a program's data (the operator's release manifests), and the variable
# that tells the program so.
KO_DATA = ("var/run/ko", "KO_DATA_PATH=/var/run/ko")
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the release manifests are large


class KnativeError(ValueError):
    """The caller asked for something Knative cannot be installed with."""


def serving_image_keys() -> list[str]:
    return [f"knative-{command}" for command in SERVING_COMMANDS]


def operator_image_keys() -> list[str]:
    return [f"knative-operator-{command}" for command in OPERATOR_COMMANDS]


def image_keys() -> list[str]:
    """The keys of the ``images`` that :func:`operator_values` and :func:`knative_serving` take."""
    return serving_image_keys() + operator_image_keys()


def module_version() -> str:
    """The knative.dev/operator version the test bed builds (testbed/knative-operator/go.mod)."""
    return ModuleChart(OPERATOR_MODULE, OPERATOR_GO_MOD, ".").version()


def release(version: str) -> str:
    """Knative's release for one of its Go module versions: module tags are v0.(N+27).P for
    release 1.N.P (``v0.48.1`` is ``1.21.1``)."""
    major, minor, patch = version.removeprefix("v").split(".")
    if major != "0" or int(minor) <= 27:
        raise KnativeError(f"{version} is not a Knative 1.x module version")
    return f"1.{int(minor) - 27}.{patch}"


def operator_chart() -> ModuleChart:
    """The operator's chart, filled in as its release script fills it in."""
    version = release(module_version())
    fill = (("{{ version }}", version), ("{{ tag }}", f"v{version}"))
    return ModuleChart(OPERATOR_MODULE, OPERATOR_GO_MOD, "config/charts/knative-operator", fill)


def kodata() -> ModuleChart:
    """The release manifests the operator's image carries (ko's ``kodata``)."""
    return ModuleChart(OPERATOR_MODULE, OPERATOR_GO_MOD, "cmd/operator/kodata")


def operator_values(images: Mapping[str, str]) -> Obj:
    """infra's values for the operator's chart, pointed at the images built here (by tag:
    the chart writes ``<image>:<tag>``)."""
    _require(images, operator_image_keys())
    changes: Obj = {}
    for key, command in (("knative_operator", "operator"), ("operator_webhook", "webhook")):
        repository, tag = split(images[f"knative-operator-{command}"])
        changes[key] = {"image": repository, "tag": tag}
    return merged(manifests.knative_operator_values(), {"knative_operator": changes})


def knative_serving(images: Mapping[str, str], *, features: Mapping[str, str]) -> Obj:
    """infra's KnativeServing for Serving at this release, with infra's default settings, and
    this machine's changes (module docstring). ``images`` by digest."""
    _require(images, [*serving_image_keys(), "knative-operator-migrate"])
    defaults = KnativeSettings(serving_version=release(module_version()))
    serving = manifests.knative_serving(
        version=defaults.serving_version,
        domain=DOMAIN,
        scale_to_zero=defaults.scale_to_zero,
        stable_window=defaults.stable_window,
        grace_period=defaults.scale_to_zero_grace_period,
    )
    spec = serving["spec"]
    spec["registry"] = {"override": registry_override(images)}
    spec["ingress"]["kourier"]["enabled"] = False
    # The operator's override reaches containers and the queue-proxy's cache entry, not
    # config-deployment, from which Knative adds the queue-proxy sidecar to every revision.
    spec["config"]["deployment"] = {
        "queue-sidecar-image": images["knative-queue"],
        "registries-skipping-tag-resolving": SKIP_TAG_RESOLVING,
    }
    spec["config"]["features"] = dict(features)
    return serving


def registry_override(images: Mapping[str, str]) -> dict[str, str]:
    """The operator's image overrides: ``<deployment>/<container>`` for Serving's Deployments
    (Kourier's controller's container is called ``controller`` too), the queue-proxy sidecar and
    its cache entry by name, and the post-install Jobs' containers by name."""
    override = {f"{name}/{name}": images[f"knative-{name}"] for name in DEPLOYMENTS}
    override["queue-proxy"] = images["knative-queue"]
    override["cleanup"] = images["knative-cleanup"]
    override["migrate"] = images["knative-operator-migrate"]
    return override


def default_features() -> dict[str, str]:
    """Serving's own ``config-features`` as the release ships it (what a key not set in the
    KnativeServing is)."""
    return release_config("config-features")


def release_config(name: str) -> dict[str, str]:
    """The data of one of Serving's ConfigMaps as the release ships it, ``_example`` aside."""
    return dict(_release_config(name))


@functools.cache
def _release_config(name: str) -> dict[str, str]:
    folder = kodata().path() / "knative-serving" / release(module_version())
    for path in sorted(folder.glob("*.yaml")):
        for doc in yaml.load_all(path.read_text(), Loader=LOADER):
            if doc and doc.get("kind") == "ConfigMap" and doc["metadata"]["name"] == name:
                return {k: v for k, v in doc.get("data", {}).items() if k != "_example"}
    raise KnativeError(f"Knative {folder.name}'s manifests have no ConfigMap {name}")


def _require(images: Mapping[str, str], keys: list[str]) -> None:
    missing = [key for key in keys if not images.get(key)]
    if missing:
        raise KnativeError(f"no image given for {', '.join(missing)}")
