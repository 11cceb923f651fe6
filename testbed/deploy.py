"""radixfleet's own kustomize bases deployed as a platform team deploys them: an overlay that
names the images by digest (the bases carry placeholders), applied server-side; the platform
(runtimes, operator, region entry) installed and removed in one call. Used by the cluster tests
and by `make demo-cluster`."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from radixfleet.kit.leader import PEERING_NAME, role_in
from radixfleet.render import entry as entry_base
from radixfleet.render import operator
from testbed import images
from testbed.cluster import Cluster, is_ready
from testbed.images import REPO

OPERATOR_SELECTOR = f"app.kubernetes.io/name={operator.NAME}"


def overlay(
    folder: Path,
    base: str,
    image: images.ImageRecord,
    *,
    patches: Sequence[Mapping[str, Any]] = (),
) -> Path:
    """A kustomize overlay of `deploy/<base>/` that sets radixfleet's image by digest."""
    folder.mkdir(parents=True, exist_ok=True)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [os.path.relpath(REPO / "deploy" / base, folder)],
        "images": [{"name": "radixfleet", "newName": image.pinned.partition("@")[0],
                    "digest": image.digest}],
        "patches": [dict(p) for p in patches],
    }  # fmt: skip
    (folder / "kustomization.yaml").write_text(json.dumps(kustomization))
    return folder


def router_image_patch(router: images.ImageRecord) -> dict[str, Any]:
    """The overlay patch that gives the operator's routers controller the smg image."""
    patch = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": operator.NAME, "namespace": operator.NAMESPACE},
        "spec": {"template": {"spec": {"containers": [{
            "name": "operator",
            "env": [{"name": operator.ROUTER_IMAGE_ENV, "value": router.pinned}],
        }]}}},
    }  # fmt: skip
    return {"patch": json.dumps(patch)}


# The field manager radixfleet's own objects are applied by on the test cluster, as a platform
# team's one owner of them: an object two managers apply conflicts on any atomic field the API
# server defaults (a ValidatingAdmissionPolicy's matchConstraints).
PLATFORM_FIELD_MANAGER = "radixfleet"


def apply_overlay(cluster: Cluster, folder: Path) -> None:
    cluster.kubectl("apply", "--server-side", f"--field-manager={PLATFORM_FIELD_MANAGER}", "-k",
                    str(folder))  # fmt: skip


def install_platform(
    cluster: Cluster,
    folder: Path,
    image: images.ImageRecord,
    router: images.ImageRecord,
    *,
    before_entry: Sequence[Mapping[str, Any]] = (),
) -> None:
    """radixfleet on a region as a platform team installs it: the rendered runtimes, then the
    operator (its routers controller given the smg image) and the region entry from their
    kustomize bases, each by an overlay written under `folder`. `before_entry` is applied
    between the two (what the entry reads when it starts)."""
    from testbed import session

    cluster.kubectl("apply", "--server-side", f"--field-manager={PLATFORM_FIELD_MANAGER}",
                    "-k", str(REPO / "runtimes"))  # fmt: skip
    apply_overlay(cluster, overlay(folder / "operator", "operator", image,
                                   patches=[router_image_patch(router)]))  # fmt: skip
    if before_entry:
        session.apply(cluster, before_entry, field_manager=PLATFORM_FIELD_MANAGER)
    apply_overlay(cluster, overlay(folder / "entry", "entry", image))


def remove_platform(cluster: Cluster, folder: Path) -> None:
    """The entry and the operator `install_platform` applied from `folder`, gone (the runtimes
    stay: every module applies the same ones)."""
    cluster.kubectl("delete", "-k", str(folder / "entry"), "--wait=false", check=False)
    remove_operator(cluster)


@contextmanager
def platform(cluster: Cluster, folder: Path) -> Iterator[images.ImageRecord]:
    """The images loaded and the platform installed for the block; radixfleet's image, which
    the block's models run. Removed after, however the block ends."""
    from testbed import session

    image, router = images.radixfleet(), images.smg()
    session.load_images(cluster, [image, router])
    install_platform(cluster, folder, image, router)
    try:
        yield image
    finally:
        remove_platform(cluster, folder)


def entry_url(cluster: Cluster) -> str:
    """The region entry's URL inside the cluster, once its rollout is done."""
    from testbed import session

    session.wait_rollout(cluster, namespace=operator.NAMESPACE, deployment=entry_base.NAME)
    service = _get(cluster, "service", entry_base.NAME, "-n", operator.NAMESPACE)
    return f"http://{service['spec']['clusterIP']}"


def apply_pod_monitors(cluster: Cluster) -> None:
    """`deploy/monitoring/`'s PodMonitors, at the test bed's scrape interval, for the platform's
    Prometheus (testbed/prometheus.py); after an overlay has made their namespace."""
    from testbed import prometheus, session

    session.apply(cluster, prometheus.fast_pod_monitors(), field_manager=PLATFORM_FIELD_MANAGER)


def remove_operator(cluster: Cluster) -> None:
    """Other modules run their own operators with the same peering object: leave none behind."""
    cluster.kubectl("delete", "deployment", operator.NAME, "-n", operator.NAMESPACE,
                    "--wait=true", "--timeout=120s", check=False)  # fmt: skip
    cluster.kubectl("delete", "pods", "-l", OPERATOR_SELECTOR, "-n", operator.NAMESPACE,
                    "--wait=true", "--timeout=120s", check=False)  # fmt: skip


def operator_leader(cluster: Cluster) -> str | None:
    """The operator pod that leads, once all the Deployment's replicas run Ready, else None.

    Every replica standing in the election is Ready (radixfleet/kit/leader.py), so the leader is
    read where kopf decides it: the peering object's status, each live pod's keep-alive and
    priority, ranked as kopf ranks them (`role_in`).
    """
    pods = [p for p in _get(cluster, "pods", "-n", operator.NAMESPACE, "-l", OPERATOR_SELECTOR)
            ["items"] if not p["metadata"].get("deletionTimestamp")]  # fmt: skip
    ready = [p["metadata"]["name"] for p in pods if is_ready(p)]
    if len(ready) != operator.REPLICAS:
        return None
    peering = cluster.kubectl("get", "clusterkopfpeering", PEERING_NAME, "-o", "json", check=False)
    if peering.returncode != 0:
        return None
    peers: dict[str, Any] = json.loads(peering.stdout).get("status") or {}
    now = datetime.now(UTC)
    leading = [
        name for name in ready if name in peers and role_in(
            peers, identity=name, priority=int(peers[name].get("priority", 0)), now=now
        ) == "leading"
    ]  # fmt: skip
    return leading[0] if len(leading) == 1 else None


def _get(cluster: Cluster, *args: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)
    return found


def wait_accounted(cluster: Cluster, namespace: str, *, timeout_s: float = 240.0) -> None:
    """Wait until the quota controller has accounted the namespace's tenant (its ResourceQuota
    exists): until then the quota's admission policy, when installed, refuses the tenant's GPU
    InferenceServices with "retry shortly"."""
    from testbed import session

    def accounted() -> bool:
        found = cluster.kubectl("get", "resourcequota", "radixfleet-gpus", "-n", namespace,
                                check=False)  # fmt: skip
        return found.returncode == 0

    session.wait_for(accounted, timeout_s=timeout_s, what=f"tenant of {namespace} accounted")
