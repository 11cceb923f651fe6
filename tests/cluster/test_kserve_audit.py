"""The audit cases (tests/data/audit_cases) judged by the real webhooks: every case that
`radixfleet validate` refuses on KServe's or Knative's behalf is refused by the real KServe v0.20.0
or Knative Serving 1.21.1 too, and every case it accepts is accepted. `tests/test_validate.py` runs
the same cases through validate, so the two judges cannot drift apart unnoticed.

KServe refuses at admission. Knative refuses later: KServe accepts the InferenceService and the
runtime, then Knative's webhook refuses the Knative Service KServe makes of them, and KServe
reports that refusal in the InferenceService's PredictorReady condition. Each Knative case runs
under the config-features it names (radixfleet's, platform.py, when it names none).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from radixfleet.platform import KNATIVE_FEATURES
from testbed import session
from testbed.cluster import Cluster
from testbed.emulated import MODE, get
from tests.audit_cases import AuditCase, load_cases
from tests.cluster.conftest import REPO

CASES = load_cases()
KSERVE_CASES = [case for case in CASES if case.refused_by == "kserve-webhook"]
KNATIVE_CASES = [case for case in CASES if case.refused_by == "knative-webhook"]
AUDIT_NAMESPACE = "audit"
KNATIVE_WEBHOOK = "validation.webhook.serving.knative.dev"
JUDGED_TIMEOUT_S = 90.0


@pytest.fixture(scope="module")
def audit_cluster(kserve: Cluster) -> Iterator[Cluster]:
    """KServe with none of the rendered runtimes (the cases bring their own, and a rendered one
    would collide with theirs), and the cases' namespace; the platform's features again after."""
    kserve.kubectl("delete", "-k", str(REPO / "runtimes"), "--ignore-not-found", "--wait=true")
    kserve.kubectl("create", "namespace", AUDIT_NAMESPACE)
    yield kserve
    _set_features(kserve, KNATIVE_FEATURES)


def _name(manifest: dict[str, Any]) -> str:
    return f"{manifest['kind']}/{manifest['metadata']['name']}"


def _create_in_order(
    cluster: Cluster, manifests: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], str | None]:
    """Create each manifest; stop at the first refusal. What was created, and who was refused."""
    created: list[dict[str, Any]] = []
    for manifest in manifests:
        result = cluster.kubectl("create", "-f", "-", stdin=json.dumps(manifest), check=False)
        if result.returncode != 0:
            return created, f"{_name(manifest)}: {result.stderr.strip()}"
        created.append(manifest)
    return created, None


def _delete(cluster: Cluster, created: list[dict[str, Any]]) -> None:
    for manifest in reversed(created):
        cluster.kubectl(
            "delete", "-f", "-", "--wait=true", "--ignore-not-found", stdin=json.dumps(manifest)
        )


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
        _delete(audit_cluster, created)


def _set_features(cluster: Cluster, features: Mapping[str, str]) -> None:
    """Knative's config-features as exactly `features` (the release's defaults for the rest),
    set in the KnativeServing as a platform team sets them."""
    session.set_knative_features(cluster, features)
    # The webhook reads the ConfigMap through an informer: give the watch event a moment.
    time.sleep(3)


def _knative_verdict(cluster: Cluster, isvc: dict[str, Any]) -> str | None:
    """None while KServe has not acted; "accepted" once the predictor's workload exists (a
    Knative Service, or a Deployment in Standard mode); else Knative's refusal."""
    name, namespace = isvc["metadata"]["name"], isvc["metadata"]["namespace"]
    status = get(cluster, "isvc", name, "-n", namespace).get("status", {})
    for condition in status.get("conditions", []):
        message = condition.get("message", "")
        if condition["type"] == "PredictorReady" and KNATIVE_WEBHOOK in message:
            return message
    standard = (isvc["metadata"].get("annotations") or {}).get(MODE) == "Standard"
    kind = "deployment" if standard else "ksvc"
    found = cluster.kubectl("get", kind, f"{name}-predictor", "-n", namespace, check=False)
    return "accepted" if found.returncode == 0 else None


@pytest.mark.parametrize("case", KNATIVE_CASES, ids=[case.name for case in KNATIVE_CASES])
def test_knatives_webhook_judges_each_case_as_validate_does(
    audit_cluster: Cluster, case: AuditCase
) -> None:
    _set_features(audit_cluster, case.features)
    created, refusal = _create_in_order(audit_cluster, case.manifests)
    try:
        assert refusal is None, f"KServe refused what only Knative should judge: {refusal}"
        (isvc,) = [m for m in case.manifests if m["kind"] == "InferenceService"]
        verdict: str | None = None
        deadline = time.monotonic() + JUDGED_TIMEOUT_S
        while verdict is None and time.monotonic() < deadline:
            time.sleep(1)
            verdict = _knative_verdict(audit_cluster, isvc)
        assert verdict is not None, "KServe made no predictor workload and reported no refusal"
        if case.refusal is None:
            assert verdict == "accepted", f"Knative refused what validate accepts: {verdict}"
        else:
            assert verdict != "accepted", f"Knative accepted what validate refuses: {case.refusal}"
    finally:
        _delete(audit_cluster, created)
