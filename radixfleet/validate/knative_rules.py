"""Knative Serving's webhook rules for a revision's pod, given the cluster's feature flags.

KServe turns a Knative-mode predictor into a Knative Service, and Knative's webhook refuses the
whole InferenceService when its pod breaks these rules. Read from knative.dev/serving v0.48.1
(Knative Serving 1.21.1, what KServe v0.20.0 requires):

- `pkg/apis/serving/fieldmask.go: PodSpecMask`: pod fields allowed only while their flag in the
  `config-features` ConfigMap is not "disabled"; `SecurityContextMask`: `privileged` only false;
  `CapabilitiesMask`: `add` only with `kubernetes.containerspec-addcapabilities`.
- `pkg/apis/serving/k8s_validation.go`: one port across all containers, named "", "http1" or
  "h2c", TCP, not a port the queue-proxy reserves (`validateContainersPorts`,
  `validateContainerPorts`, `reservedPorts`); volumes only of enabled kinds, each mounted, each
  mount naming a volume, not on a reserved path, read-only unless emptyDir or PVC
  (`ValidateVolumes`, `validateVolume`, `validatePersistentVolumeClaims`,
  `validateVolumeMounts`); init containers only with their flag (`validateInitContainers`);
  fieldRef env only unless `kubernetes.podspec-fieldref` is disabled (`validateEnvValueFrom`);
  no env Knative sets itself (`reservedEnvVars`, `validateEnvVar`).
- `config/core/configmaps/features.yaml`: the flags' defaults (DEFAULT_FEATURES).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Mapping
from typing import Any

from radixfleet.validate.podview import Part, PodView

DISABLED = "disabled"
# The defaults of features.yaml at v0.48.1, for the flags these rules read.
DEFAULT_FEATURES: Mapping[str, str] = {
    "multi-container": "enabled",
    "secure-pod-defaults": "disabled",
    "kubernetes.podspec-affinity": DISABLED,
    "kubernetes.podspec-topologyspreadconstraints": DISABLED,
    "kubernetes.podspec-hostaliases": DISABLED,
    "kubernetes.podspec-nodeselector": DISABLED,
    "kubernetes.podspec-tolerations": DISABLED,
    "kubernetes.podspec-fieldref": DISABLED,
    "kubernetes.podspec-runtimeclassname": DISABLED,
    "kubernetes.podspec-dnspolicy": DISABLED,
    "kubernetes.podspec-dnsconfig": DISABLED,
    "kubernetes.podspec-securitycontext": DISABLED,
    "kubernetes.podspec-shareprocessnamespace": DISABLED,
    "kubernetes.podspec-hostipc": DISABLED,
    "kubernetes.podspec-hostpid": DISABLED,
    "kubernetes.podspec-hostnetwork": DISABLED,
    "kubernetes.podspec-priorityclassname": DISABLED,
    "kubernetes.podspec-schedulername": DISABLED,
    "kubernetes.containerspec-addcapabilities": DISABLED,
    "kubernetes.podspec-volumes-emptydir": "enabled",
    "kubernetes.podspec-volumes-image": DISABLED,
    "kubernetes.podspec-volumes-hostpath": DISABLED,
    "kubernetes.podspec-volumes-csi": DISABLED,
    "kubernetes.podspec-init-containers": DISABLED,
    "kubernetes.podspec-persistent-volume-claim": DISABLED,
    "kubernetes.podspec-persistent-volume-write": DISABLED,
}
# Pod fields Knative always allows (automountServiceAccountToken only as false).
ALWAYS_ALLOWED = frozenset(
    {"serviceAccountName", "imagePullSecrets", "enableServiceLinks", "automountServiceAccountToken"}
)
# Pod fields behind a flag (PodSpecMask).
GATED_FIELDS: Mapping[str, str] = {
    "affinity": "kubernetes.podspec-affinity",
    "topologySpreadConstraints": "kubernetes.podspec-topologyspreadconstraints",
    "hostAliases": "kubernetes.podspec-hostaliases",
    "nodeSelector": "kubernetes.podspec-nodeselector",
    "runtimeClassName": "kubernetes.podspec-runtimeclassname",
    "tolerations": "kubernetes.podspec-tolerations",
    "securityContext": "kubernetes.podspec-securitycontext",
    "shareProcessNamespace": "kubernetes.podspec-shareprocessnamespace",
    "priorityClassName": "kubernetes.podspec-priorityclassname",
    "schedulerName": "kubernetes.podspec-schedulername",
    "dnsPolicy": "kubernetes.podspec-dnspolicy",
    "dnsConfig": "kubernetes.podspec-dnsconfig",
    "hostIPC": "kubernetes.podspec-hostipc",
    "hostPID": "kubernetes.podspec-hostpid",
    "hostNetwork": "kubernetes.podspec-hostnetwork",
}
# Volume kinds behind a flag (validateVolume); others are always allowed or always refused.
VOLUME_FLAGS: Mapping[str, str] = {
    "emptyDir": "kubernetes.podspec-volumes-emptydir",
    "persistentVolumeClaim": "kubernetes.podspec-persistent-volume-claim",
    "hostPath": "kubernetes.podspec-volumes-hostpath",
    "csi": "kubernetes.podspec-volumes-csi",
    "image": "kubernetes.podspec-volumes-image",
}
UNGATED_VOLUMES = frozenset({"secret", "configMap", "projected"})
PORT_NAMES = ("", "http1", "h2c")
# The queue-proxy's and the profiler's ports (pkg/networking/constants.go, knative.dev/pkg
# profiling): a user container may not take them.
RESERVED_PORTS = frozenset({8012, 8013, 8022, 9090, 9091, 8008})
RESERVED_PATHS = frozenset({"/", "/dev", "/dev/log"})
# What Knative sets in every user container (reservedEnvVars).
RESERVED_ENV = frozenset({"PORT", "K_SERVICE", "K_CONFIGURATION", "K_REVISION"})
SIDECAR_RESERVED_ENV = RESERVED_ENV - {"PORT"}

Problem = tuple[Part, str, str]


def features_with(overrides: Mapping[str, str]) -> dict[str, str]:
    """Knative's defaults with the cluster's `config-features` entries on top."""
    return {**DEFAULT_FEATURES, **overrides}


def _on(features: Mapping[str, str], flag: str) -> bool:
    return features.get(flag, DEFAULT_FEATURES.get(flag, DISABLED)) != DISABLED


def flags_used(pod: PodView) -> set[str]:
    """The feature flags, off in stock Knative, that `pod` needs switched on."""
    wanted = {GATED_FIELDS[name] for name in pod.fields if name in GATED_FIELDS}
    for volume in pod.volumes:
        kinds = set(volume.value) if isinstance(volume.value, dict) else set()
        wanted |= {VOLUME_FLAGS[k] for k in kinds if k in VOLUME_FLAGS}
    if pod.init_containers:
        wanted.add("kubernetes.podspec-init-containers")
    return {flag for flag in wanted if DEFAULT_FEATURES.get(flag, DISABLED) == DISABLED}


def check_pod(pod: PodView, features: Mapping[str, str]) -> Iterator[Problem]:
    """Every rule of Knative's webhook that `pod` breaks under `features`."""
    yield from _pod_fields(pod, features)
    yield from _ports(pod)
    yield from _volumes(pod, features)
    yield from _mounts(pod)
    yield from _containers(pod, features)


def _pod_fields(pod: PodView, features: Mapping[str, str]) -> Iterator[Problem]:
    for name, part in pod.fields.items():
        flag = GATED_FIELDS.get(name)
        if flag and not _on(features, flag):
            if name == "securityContext" and _on(features, "secure-pod-defaults"):
                continue
            yield part, "", f"Knative refuses {name} while config-features {flag} is disabled"
        elif flag is None and name not in ALWAYS_ALLOWED:
            yield part, "", f"Knative refuses the pod field {name}"
        elif name == "automountServiceAccountToken" and part.value is not False:
            yield part, "", "Knative allows automountServiceAccountToken only as false"


def _ports(pod: PodView) -> Iterator[Problem]:
    ports = [p for c in pod.containers for p in c.ports]
    for extra in ports[1:]:
        yield extra, "", "Knative allows one container port across all containers"
    for port in ports[:1]:
        value = port.value if isinstance(port.value, dict) else {}
        name = value.get("name", "")
        if name not in PORT_NAMES:
            allowed = ", ".join(repr(n) for n in PORT_NAMES)
            yield port, ".name", f"Knative refuses port name {name!r} (allowed: {allowed})"
        if value.get("protocol", "TCP") != "TCP":
            yield port, ".protocol", "Knative serves TCP ports only"
        if value.get("containerPort") in RESERVED_PORTS:
            yield port, ".containerPort", f"{value['containerPort']} is reserved by Knative"


def _volumes(pod: PodView, features: Mapping[str, str]) -> Iterator[Problem]:
    mounted = {
        m.value.get("name")
        for c in pod.containers + pod.init_containers
        for m in c.mounts
        if isinstance(m.value, dict)
    }
    for volume in pod.volumes:
        value = volume.value if isinstance(volume.value, dict) else {}
        if value.get("name") not in mounted:
            yield volume, ".name", f"Knative refuses volume {value.get('name')!r}: not mounted"
        yield from _volume_kind(volume, value, features)


def _volume_kind(
    volume: Part, value: dict[str, Any], features: Mapping[str, str]
) -> Iterator[Problem]:
    for kind in sorted(set(value) - {"name"}):
        flag = VOLUME_FLAGS.get(kind)
        if flag is None and kind not in UNGATED_VOLUMES:
            yield volume, f".{kind}", f"Knative refuses {kind} volumes"
        elif flag and not _on(features, flag):
            yield volume, f".{kind}", f"Knative refuses {kind} volumes while {flag} is disabled"
    claim = value.get("persistentVolumeClaim")
    write = "kubernetes.podspec-persistent-volume-write"
    if isinstance(claim, dict) and not claim.get("readOnly") and not _on(features, write):
        yield (
            volume,
            ".persistentVolumeClaim",
            f"Knative refuses a writable claim while {write} is disabled",
        )


def _mounts(pod: PodView) -> Iterator[Problem]:
    volumes = {v.value.get("name"): v.value for v in pod.volumes if isinstance(v.value, dict)}
    for container in pod.containers + pod.init_containers:
        for mount in container.mounts:
            yield from _mount(mount, volumes)


def _mount(mount: Part, volumes: Mapping[Any, dict[str, Any]]) -> Iterator[Problem]:
    value = mount.value if isinstance(mount.value, dict) else {}
    volume = volumes.get(value.get("name"))
    if volume is None:
        yield mount, ".name", f"volumeMount {value.get('name')!r} has no matching volume"
        return
    path = posixpath.normpath(str(value.get("mountPath", "")))
    if path in RESERVED_PATHS:
        yield mount, ".mountPath", f"Knative reserves the mount path {path}"
    writable = "emptyDir" in volume or "persistentVolumeClaim" in volume
    if not writable and not value.get("readOnly"):
        yield mount, ".readOnly", "Knative wants this kind of volume mounted readOnly"


def _containers(pod: PodView, features: Mapping[str, str]) -> Iterator[Problem]:
    if len(pod.containers) > 1 and not _on(features, "multi-container"):
        for extra in pod.containers[1:]:
            if extra.whole:
                yield extra.whole, "", "Knative refuses a second container: multi-container is off"
    flag = "kubernetes.podspec-init-containers"
    if not _on(features, flag):
        for init in pod.init_containers:
            if init.whole:
                yield init.whole, "", f"Knative refuses init containers while {flag} is disabled"
    for container in pod.containers + pod.init_containers:
        yield from _security(container.security, features)
        # The serving container is the one with the port (or the only one); only it gets PORT.
        user = container in pod.containers and (bool(container.ports) or len(pod.containers) == 1)
        yield from _env(container.env, features, RESERVED_ENV if user else SIDECAR_RESERVED_ENV)


def _security(part: Part | None, features: Mapping[str, str]) -> Iterator[Problem]:
    value = part.value if part and isinstance(part.value, dict) else {}
    if part and value.get("privileged") is True:
        yield part, ".privileged", "Knative allows privileged only as false"
    flag = "kubernetes.containerspec-addcapabilities"
    if part and (value.get("capabilities") or {}).get("add") and not _on(features, flag):
        yield (
            part,
            ".capabilities.add",
            f"Knative refuses added capabilities while {flag} is disabled",
        )


def _env(
    env: list[Part], features: Mapping[str, str], reserved: frozenset[str]
) -> Iterator[Problem]:
    flag = "kubernetes.podspec-fieldref"
    for var in env:
        value = var.value if isinstance(var.value, dict) else {}
        if value.get("name") in reserved:
            yield var, ".name", f"Knative sets {value['name']} itself: a container may not"
        source = value.get("valueFrom")
        fieldref = isinstance(source, dict) and (
            "fieldRef" in source or "resourceFieldRef" in source
        )
        if fieldref and not _on(features, flag):
            yield var, ".valueFrom", f"Knative refuses fieldRef env while {flag} is disabled"
