"""The audit cases (tests/data/audit_cases) judged by KServe's own webhooks: every case that
`radixfleet validate` refuses on KServe's behalf is refused by the real KServe v0.20.0 too, and
every case it accepts is accepted. `tests/test_validate.py` runs the same cases through validate,
so the two judges cannot drift apart unnoticed.

Knative's cases wait for Knative Serving in the test cluster (testbed/NETWORKING.md).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from testbed.cluster import Cluster
from tests.audit_cases import AuditCase, load_cases
from tests.cluster.conftest import REPO

KSERVE_CASES = [case for case in load_cases() if case.refused_by == "kserve-webhook"]
AUDIT_NAMESPACE = "audit"


@pytest.fixture(scope="module")
def audit_cluster(kserve: Cluster) -> Cluster:
    """KServe with none of the rendered runtimes (the cases bring their own, and a rendered one
    would collide with theirs), and the cases' namespace."""
    kserve.kubectl("delete", "-k", str(REPO / "runtimes"), "--ignore-not-found", "--wait=true")
    kserve.kubectl("create", "namespace", AUDIT_NAMESPACE)
    return kserve


def _name(manifest: dict[str, Any]) -> str:
    return f"{manifest['kind']}/{manifest['metadata']['name']}"


def _create_in_order(cluster: Cluster, manifests: list[dict[str, Any]]) -> tuple[list, str | None]:
    """Create each manifest; stop at the first refusal. What was created, and who was refused."""
    created = []
    for manifest in manifests:
        result = cluster.kubectl("create", "-f", "-", stdin=json.dumps(manifest), check=False)
        if result.returncode != 0:
            return created, f"{_name(manifest)}: {result.stderr.strip()}"
        created.append(manifest)
    return created, None


@pytest.mark.parametrize("case", KSERVE_CASES, ids=[case.name for case in KSERVE_CASES])
def test_kserves_webhooks_judge_each_case_as_validate_does(
    audit_cluster: Cluster, case: AuditCase
) -> None:
    created, refusal = _create_in_order(audit_cluster, case.manifests)
    try:
        if case.refusal is None:
            assert refusal is None, f"KServe refused what validate accepts: {refusal}"
        else:
            assert refusal is not None, f"KServe accepted what validate refuses ({case.refusal})"
            assert refusal.startswith(f"{case.refusal.object}:"), refusal
            assert "admission webhook" in refusal, refusal
    finally:
        for manifest in reversed(created):
            audit_cluster.kubectl(
                "delete", "-f", "-", "--wait=true", "--ignore-not-found", stdin=json.dumps(manifest)
            )
