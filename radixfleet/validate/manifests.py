"""Validate manifest files: every document against its schema, its names and its SGLang flags,
and all of them together against KServe's and Knative's admission rules (`admission`)."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from radixfleet import labels
from radixfleet.bounded_yaml import YamlBoundsError, check_bounds
from radixfleet.config.catalog import storage_grant_problem
from radixfleet.config.errors import ConfigError
from radixfleet.config.gpus import GIB, INSTANCE_TYPES, gpu_label_value
from radixfleet.config.load import MAX_CATALOG_BYTES, read_bounded
from radixfleet.config.sizing import HICACHE_GB, HICACHE_RESERVE_GIB
from radixfleet.platform import KNATIVE_FEATURES, KUBERNETES_VERSION
from radixfleet.sglang_flags import check_args, first_value, parse_args
from radixfleet.validate.admission import check_set
from radixfleet.validate.crd_schema import CrdKey, crd_schemas
from radixfleet.validate.knative_rules import features_with
from radixfleet.validate.podview import Doc

# kubernetes-validate names its schemas by patch release; any patch of the minor will do.
KUBERNETES_SCHEMAS = f"{KUBERNETES_VERSION}.0"
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
# KServe derives DNS names (`<name>-predictor.<namespace>`) from an InferenceService's name, so
# it must be a DNS-1035 label, like a Service's.
DNS1035_KINDS = {"InferenceService", "Service"}
LABEL_KINDS = {"Namespace", "InferenceService"}


@dataclass(frozen=True)
class Finding:
    """One problem in one object of one file."""

    file: str
    obj: str
    location: str
    message: str

    def __str__(self) -> str:
        where = f"{self.location}: " if self.location else ""
        return f"{self.file}: {self.obj}: {where}{self.message}"


def validate_paths(
    paths: Iterable[Path], *, features: Mapping[str, str] = KNATIVE_FEATURES
) -> list[Finding]:
    """Every problem in the manifests at `paths` (files, or folders as kustomize builds them).

    Objects are also judged together, as a cluster's webhooks would judge them applied in this
    order, with Knative's `config-features` set to `features` (by default what infra enables).
    """
    return list(iter_findings(paths, features=features))


def iter_findings(
    paths: Iterable[Path], *, features: Mapping[str, str] = KNATIVE_FEATURES
) -> Iterator[Finding]:
    """`validate_paths`, streamed: each document's own problems as soon as it is parsed (a
    50 MB file reports its first bad document at once, not after the last), then the problems
    of the objects judged together. A problem shows once, however often it is found."""
    docs: list[Doc] = []
    shown: set[Finding] = set()
    for finding in _each_document(paths, docs):
        if finding not in shown:
            shown.add(finding)
            yield finding
    for d, loc, msg in check_set(docs, features_with(features)):
        # A runtime's problem shows once, however many InferenceServices use the runtime.
        finding = Finding(d.source, d.ref, loc, msg)
        if finding not in shown:
            shown.add(finding)
            yield finding


def _each_document(paths: Iterable[Path], kept: list[Doc]) -> Iterator[Finding]:
    """The problems of each document on its own; `kept` collects the well-shaped ones."""
    try:
        files = list(_manifest_files(paths, seen=frozenset()))
    except ManifestTreeError as exc:
        yield Finding(exc.file, "-", "", str(exc))
        return
    for file in files:
        try:
            text = read_bounded(file, limit=MAX_CATALOG_BYTES)
        except ConfigError as exc:  # unreadable, too large, or not UTF-8
            yield Finding(str(file), "-", "", _unreadable(exc))
            continue
        try:
            for index, body in enumerate(_documents(text)):
                doc = Doc(str(file), _ref(body, index), body)
                yield from (Finding(doc.source, doc.ref, loc, msg) for loc, msg in _check(body))
                if not _shape_problems(body):
                    kept.append(doc)
        except yaml.YAMLError as exc:
            yield Finding(str(file), "-", "", f"cannot read: {_located(text, exc)}")


class ManifestTreeError(ValueError):
    """A kustomization that cannot be followed (it includes itself, or is not a mapping)."""

    def __init__(self, file: Path, message: str) -> None:
        super().__init__(message)
        self.file = str(file)


def validate_documents(
    docs: Iterable[Any], *, source: str, features: Mapping[str, str] = KNATIVE_FEATURES
) -> list[Finding]:
    """Every problem of the given parsed YAML documents; `source` names their file."""
    judged = [Doc(source, _ref(d, i), d) for i, d in enumerate(docs)]
    findings = [Finding(d.source, d.ref, loc, msg) for d in judged for loc, msg in _check(d.body)]
    objects = [d for d in judged if not _shape_problems(d.body)]
    findings += [Finding(d.source, d.ref, loc, msg) for d, loc, msg in check_set(objects,
                 features_with(features))]  # fmt: skip
    return list(dict.fromkeys(findings))


def _manifest_files(paths: Iterable[Path], *, seen: frozenset[Path]) -> Iterator[Path]:
    """The files of `paths`, following kustomizations; `seen` are the kustomize folders above."""
    for path in paths:
        kustomization = path / "kustomization.yaml"
        if kustomization.is_file():
            folder = path.resolve()
            if folder in seen:
                raise ManifestTreeError(kustomization, "the kustomization includes itself")
            for entry in _resources(kustomization):
                target = path / entry
                # kustomize's default load restrictor: files only from inside the folder (other
                # kustomization folders, bases, may be anywhere).
                if not target.is_dir() and not target.resolve().is_relative_to(folder):
                    message = f"resource {entry!r} is a file outside the kustomization's folder"
                    raise ManifestTreeError(kustomization, message)
                yield from _manifest_files([target], seen=seen | {folder})
        elif path.is_dir():
            yield from sorted(p for p in path.rglob("*.y*ml") if p.suffix in (".yaml", ".yml"))
        else:
            yield path


def _resources(kustomization: Path) -> list[str]:
    try:
        text = read_bounded(kustomization, limit=MAX_CATALOG_BYTES)
        check_bounds(text)
        loaded = yaml.safe_load(text) or {}
    except ConfigError as exc:
        raise ManifestTreeError(kustomization, _unreadable(exc)) from exc
    except yaml.YAMLError as exc:
        raise ManifestTreeError(kustomization, f"cannot read: {exc}") from exc
    resources = loaded.get("resources", []) if isinstance(loaded, dict) else None
    if not isinstance(resources, list) or not all(isinstance(r, str) for r in resources):
        raise ManifestTreeError(kustomization, "resources must be a list of paths")
    return resources


def _documents(text: str) -> Iterator[Any]:
    """The documents of a file one at a time, on libyaml's parser (a 30 MB file in seconds,
    not a minute), empty ones skipped; text past the YAML bounds is refused before it is built."""
    check_bounds(text)
    yield from (d for d in yaml.load_all(text, Loader=yaml.CSafeLoader) if d is not None)


def _located(text: str, error: yaml.YAMLError) -> yaml.YAMLError:
    """The pure-Python parser's account of the error libyaml stopped at: it says where."""
    if isinstance(error, YamlBoundsError):
        return error  # already located, and the pure-Python parser would recurse into it
    try:
        for _ in yaml.safe_load_all(text):
            pass
    except yaml.YAMLError as exc:
        return exc
    return error


def _unreadable(error: ConfigError) -> str:
    message = error.problems[0].message
    return message if message.startswith("cannot read") else f"cannot read: {message}"


def _ref(doc: Any, index: int) -> str:
    if _shape_problems(doc):
        return f"document {index + 1}"
    name = (doc.get("metadata") or {}).get("name", "?")
    return f"{doc['kind']}/{name}"


def _shape_problems(doc: Any) -> list[tuple[str, str]]:
    """What keeps a document from being judged as a Kubernetes object at all."""
    if not isinstance(doc, dict) or "apiVersion" not in doc or "kind" not in doc:
        return [("", "not a Kubernetes object (needs apiVersion and kind)")]
    problems = [
        (key, f"must be a non-empty string, not {type(doc.get(key)).__name__}")
        for key in ("apiVersion", "kind")
        if not isinstance(doc.get(key), str) or not doc[key]
    ]
    problems += [
        (key, f"must be a mapping, not {type(doc[key]).__name__}")
        for key in ("metadata", "spec")
        if doc.get(key) is not None and not isinstance(doc[key], dict)
    ]
    return problems


def _check(doc: Any) -> Iterator[tuple[str, str]]:
    shape = _shape_problems(doc)
    if shape:
        yield from shape
        return
    yield from _check_metadata(doc)
    yield from _check_schema(doc)
    yield from _check_sglang(doc)
    yield from _check_storage(doc)
    yield from _check_host_tier(doc)


def _check_metadata(doc: dict[str, Any]) -> Iterator[tuple[str, str]]:
    metadata = doc.get("metadata") or {}
    name = metadata.get("name")
    kind = doc["kind"]
    pattern, what = (
        (DNS1035_LABEL, "DNS-1035 label")
        if kind in DNS1035_KINDS
        else (DNS1123_LABEL, "DNS-1123 label")
        if kind in LABEL_KINDS
        else (DNS1123_SUBDOMAIN, "DNS-1123 subdomain")
    )
    if not isinstance(name, str) or not pattern.match(name) or len(name) > 63:
        yield "metadata.name", f"{name!r} is not a valid {what}"
    namespace = metadata.get("namespace")
    if namespace is not None and not DNS1123_LABEL.match(str(namespace)):
        yield "metadata.namespace", f"{namespace!r} is not a DNS-1123 label"
    for key, value in (metadata.get("labels") or {}).items():
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
            yield f"metadata.labels.{key}", f"{value!r} is not a valid label value"


def _check_schema(doc: dict[str, Any]) -> Iterator[tuple[str, str]]:
    key = CrdKey(doc["apiVersion"], doc["kind"])
    schema = crd_schemas().get(key)
    if schema is not None:
        for error in _crd_validator(key).iter_errors(doc):
            yield _location(error.absolute_path), _message(error)
        return
    try:
        kubernetes_validate.validate(doc, KUBERNETES_SCHEMAS, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        yield "", f"no schema known for {doc['apiVersion']} {doc['kind']}"
    except kubernetes_validate.ValidationError as exc:
        yield _location(exc.path), _message(exc)


@functools.cache
def _crd_validator(key: CrdKey) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(crd_schemas()[key])


def _location(path: Iterable[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _message(error: jsonschema.ValidationError) -> str:
    if error.validator == "additionalProperties":
        schema = error.schema if isinstance(error.schema, dict) else {}
        given = error.instance if isinstance(error.instance, dict) else {}
        extra = sorted(set(given) - set(schema.get("properties", {})))
        return f"unknown field {', '.join(repr(e) for e in extra)}"
    return error.message


def _check_storage(doc: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """An InferenceService's storage URIs by the catalog's rule: infra grants each tenant's
    role its models' prefixes, so a wildcard or a bucket root widens that grant."""
    if doc["kind"] != "InferenceService":
        return
    predictor = (doc.get("spec") or {}).get("predictor") or {}
    uris = [("spec.predictor.model.storageUri", (predictor.get("model") or {}).get("storageUri")),
            ("spec.predictor.storageUri", predictor.get("storageUri"))]  # fmt: skip
    for i, item in enumerate(predictor.get("storageUris") or []):
        uris.append((f"spec.predictor.storageUris[{i}].uri", (item or {}).get("uri")))
    for location, uri in uris:
        if isinstance(uri, str) and (problem := storage_grant_problem(uri)) is not None:
            yield location, problem


def _check_sglang(doc: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for location, args in _sglang_arg_lists(doc):
        for message in check_args([str(a) for a in args]):
            yield location, message


def _check_host_tier(doc: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """A HiCache host tier the predictor's container or its node cannot hold: sglang 0.5.23
    sizes its pools (`--hicache-size` GB for each of the container's GPU ranks) against the
    container's memory limit less 10 GiB it keeps free, and refuses to start when they do not
    fit (`mem_cache/pool_host/base.py`); nor can a node of the GPU type give more than it has."""
    if doc["kind"] != "InferenceService":
        return
    predictor = (doc.get("spec") or {}).get("predictor") or {}
    gpu_type = str((predictor.get("nodeSelector") or {}).get(labels.GPU_TYPE, ""))
    containers = [("spec.predictor.model", predictor.get("model") or {})]
    worker = predictor.get("workerSpec") or {}
    containers += [
        (f"spec.predictor.workerSpec.containers[{i}]", c or {})
        for i, c in enumerate(worker.get("containers") or [])
    ]
    for location, container in containers:
        tier = host_tier_bytes(container)
        if tier is not None:
            yield from _host_tier_fits(location, container, tier, gpu_type)


def host_tier_bytes(container: dict[str, Any]) -> int | None:
    """Bytes of the HiCache host pools an sglang container's args ask for (None: none sized)."""
    args = [str(a) for a in container.get("args") or []]
    if any(True for _ in check_args(args)):
        return None  # reported as a flag problem already
    flags = parse_args(args)
    size = first_value(flags, "hicache_size") or "0"
    if "enable_hierarchical_cache" not in flags or int(size) <= 0:
        return None
    limits = (container.get("resources") or {}).get("limits") or {}
    gpus = str(limits.get(labels.GPU_RESOURCE, 1))
    ranks = int(gpus) if gpus.isdigit() else 1  # one pool per GPU rank of the container
    return int(size) * HICACHE_GB * max(ranks, 1)


def _host_tier_fits(
    location: str, container: dict[str, Any], tier: int, gpu_type: str
) -> Iterator[tuple[str, str]]:
    limit = (((container.get("resources") or {}).get("limits")) or {}).get("memory")
    limit_bytes = None if limit is None else quantity_bytes(str(limit))
    needed = tier + HICACHE_RESERVE_GIB * GIB
    if limit_bytes is not None and needed > limit_bytes:
        yield (
            f"{location}.resources.limits.memory",
            (
                f"{limit} cannot hold the container's HiCache host tier ({tier / 1e9:.0f} GB) "
                f"and the {HICACHE_RESERVE_GIB} GiB sglang keeps free beside it: it would not start"
            ),
        )
    nodes = [
        t.memory_gib for t in INSTANCE_TYPES.values() if gpu_label_value(t.gpu_type) == gpu_type
    ]
    if nodes and tier > max(nodes) * GIB:
        yield (
            f"{location}.args",
            (
                f"a HiCache host tier of {tier / 1e9:.0f} GB is larger than the memory of any "
                f"{gpu_type} node ({max(nodes)} GiB at most)"
            ),
        )


_QUANTITY = re.compile(r"^(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_UNITS = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}  # fmt: skip


def quantity_bytes(quantity: str) -> int | None:
    """A Kubernetes memory quantity in bytes (`696Gi`, `1.5T`, `1000000`); None if it is not
    one of these forms (the schema check reports a malformed one)."""
    match = _QUANTITY.match(quantity)
    if match is None:
        return None
    return int(float(match.group(1)) * _UNITS[match.group(2)])


def _sglang_arg_lists(doc: dict[str, Any]) -> Iterator[tuple[str, list[Any]]]:
    spec = doc.get("spec") or {}
    if doc["kind"] in ("ClusterServingRuntime", "ServingRuntime"):
        for prefix, pod in (("spec", spec), ("spec.workerSpec", spec.get("workerSpec") or {})):
            for i, container in enumerate(pod.get("containers") or []):
                if "sglang.launch_server" in (container.get("command") or []):
                    yield f"{prefix}.containers[{i}].args", container.get("args") or []
    elif doc["kind"] == "InferenceService":
        predictor = spec.get("predictor") or {}
        model = predictor.get("model") or {}
        if str(model.get("runtime", "")).startswith("sglang"):
            yield "spec.predictor.model.args", model.get("args") or []
            worker = predictor.get("workerSpec") or {}
            for i, container in enumerate(worker.get("containers") or []):
                yield f"spec.predictor.workerSpec.containers[{i}].args", container.get("args") or []
