"""What every controller's Kubernetes side shares: credentials, and where kopf keeps its state.

The controllers' own adapters (`canary/kube.py`, `policies/*/kube.py`) take the ApiClient made
here; nothing is imported from the Kubernetes client until a controller asks for one.
"""

from __future__ import annotations

from typing import Any

import kopf


def api_client() -> Any:
    """An ApiClient on the in-cluster service account, else on the local kubeconfig."""
    from kubernetes import client, config

    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        config.load_kube_config()  # type: ignore[no-untyped-call]
    return client.ApiClient()


def keep_kopf_state_in_annotations(settings: kopf.OperatorSettings, *, prefix: str) -> None:
    """kopf's progress and diff-base in annotations under `prefix`, never in our status."""
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=prefix)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=prefix)
