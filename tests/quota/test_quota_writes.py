"""The policy on the operator's ResourceQuota writes: its CEL, run by cel-python, agrees with
`quota_writes.admits` on every case, generated ones included (the API server runs the CEL in
tests/cluster/test_admission.py)."""

from __future__ import annotations

from typing import Any

import celpy
import pytest
from hypothesis import given
from hypothesis import strategies as st

from radixfleet.controllers.quota import quota_writes
from radixfleet.controllers.quota.spec import QUOTA_NAME
from radixfleet.platform import RESERVED_NAMESPACES

ENV = celpy.Environment()
ADMITS = ENV.program(ENV.compile(quota_writes.ADMITS))
OPERATOR = quota_writes.OPERATOR
OURS = {"app.kubernetes.io/managed-by": "radixfleet"}
HELMS = {"app.kubernetes.io/managed-by": "helm"}


def quota(name: str = QUOTA_NAME, labels: dict[str, str] | None = OURS) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if labels is not None:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": meta}


def cel_admits(user: str, namespace: str, obj: dict[str, Any]) -> bool:
    activation = {
        "object": celpy.json_to_cel(obj),
        "request": celpy.json_to_cel({"namespace": namespace, "userInfo": {"username": user}}),
    }
    try:
        return bool(ADMITS.evaluate(activation))
    except celpy.CELEvalError:
        return False  # failurePolicy: Fail


CASES = [
    pytest.param(OPERATOR, "team-a", quota(), True, id="its-own-quota-in-a-tenant-namespace"),
    pytest.param(OPERATOR, "kube-system", quota(), False, id="kube-system"),
    pytest.param(OPERATOR, "radixfleet-system", quota(), False, id="the-platforms-namespace"),
    pytest.param(OPERATOR, "kube-node-lease", quota(), False, id="any-kube-namespace"),
    pytest.param(OPERATOR, "team-a", quota("compute"), False, id="another-quota"),
    pytest.param(OPERATOR, "team-a", quota(labels=None), False, id="not-labelled-as-ours"),
    pytest.param(OPERATOR, "team-a", quota(labels=HELMS), False, id="labelled-as-anothers"),
    pytest.param("admin", "kube-system", quota("compute"), True, id="anyone-else-is-rbacs"),
]


@pytest.mark.parametrize(("user", "namespace", "obj", "admitted"), CASES)
def test_the_operator_writes_only_its_own_quota_in_tenant_namespaces(
    user: str, namespace: str, obj: dict[str, Any], admitted: bool
) -> None:
    assert quota_writes.admits(user, namespace, obj) is admitted
    assert cel_admits(user, namespace, obj) is admitted


@given(
    user=st.sampled_from([OPERATOR, "system:serviceaccount:team-a:default", "admin"]),
    namespace=st.one_of(
        st.sampled_from(sorted(RESERVED_NAMESPACES)),
        st.from_regex(r"(kube-)?[a-z][a-z0-9-]{0,20}", fullmatch=True),
    ),
    name=st.sampled_from([QUOTA_NAME, "compute", "radixfleet-gpus-2"]),
    labels=st.one_of(st.none(), st.sampled_from([OURS, {}, {"app.kubernetes.io/managed-by": "x"}])),
)
def test_the_cel_is_the_python_rule(
    user: str, namespace: str, name: str, labels: dict[str, str] | None
) -> None:
    obj = quota(name, labels)
    assert cel_admits(user, namespace, obj) is quota_writes.admits(user, namespace, obj)
