"""Run the whole program under `pulumi.runtime.Mocks`, with no CLI, no plugins and no cloud.

The mocks echo each resource's inputs back as its outputs, add the few computed outputs the
program reads (cluster endpoint, load balancer name, certificate validation records), and record
every declared resource so that tests can assert policies over all of them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi
import yaml

from infra.program import main
from infra.settings import NAMESPACE, PLACEHOLDER_DIGEST

PROJECT = "radixfleet"
INFRA_DIR = Path(__file__).resolve().parent
EXAMPLE_STACK = INFRA_DIR / "Pulumi.example.yaml"
# The example for clusters a team already runs (cloud `kubernetes`).
EXISTING_EXAMPLE_STACK = INFRA_DIR / "Pulumi.example-existing.yaml"


@dataclass(frozen=True)
class Declared:
    """One resource the program declared: its type token, name and inputs (wire names)."""

    type: str
    name: str
    inputs: dict[str, Any]
    id: str


# A digest standing for the one a team's image push printed (the example has placeholders).
PUSHED_DIGEST = "sha256:" + hashlib.sha256(b"radixfleet test image").hexdigest()


def example_config(*, as_written: bool = False, stack: Path = EXAMPLE_STACK) -> dict[str, Any]:
    """An example stack's `config:` block, keys as written (`radixfleet:cluster`, ...), with
    each placeholder digest replaced as a team replaces it (`as_written`: left as it is)."""
    text = stack.read_text(encoding="utf-8")
    if not as_written:
        text = text.replace(PLACEHOLDER_DIGEST, PUSHED_DIGEST)
    data: dict[str, Any] = yaml.safe_load(text)
    config: dict[str, Any] = data["config"]
    return config


def radixfleet_values(config: Mapping[str, Any]) -> dict[str, Any]:
    """`radixfleet:*` entries of a stack config, without the namespace."""
    prefix = f"{NAMESPACE}:"
    return {k.removeprefix(prefix): v for k, v in config.items() if k.startswith(prefix)}


def _computed(typ: str, name: str, inputs: dict[str, Any]) -> dict[str, Any]:
    """Outputs the cloud would compute that the program reads."""
    fill: dict[str, Callable[[], dict[str, Any]]] = {
        "aws:eks/cluster:Cluster": lambda: {
            "endpoint": f"https://{name}.eks.example",
            "certificateAuthority": {"data": "Q0EK"},
            "identities": [{"oidcs": [{"issuer": f"https://oidc.example/{name}"}]}],
            # EKS makes the cluster's own security group (the nodes' way to the control plane).
            "vpcConfig": {**inputs.get("vpcConfig", {}), "clusterSecurityGroupId": f"sg-{name}"},
        },
        "aws:acm/certificate:Certificate": lambda: {
            "domainValidationOptions": [
                {
                    "domainName": d,
                    "resourceRecordName": f"_v.{d.removeprefix('*.')}.",
                    "resourceRecordType": "CNAME",
                    "resourceRecordValue": "_v.acm.example.",
                }
                for d in [inputs["domainName"], *inputs.get("subjectAlternativeNames", [])]
            ]
        },
        "aws:acm/certificateValidation:CertificateValidation": lambda: {
            "certificateArn": inputs["certificateArn"]
        },
        "kubernetes:core/v1:Service": lambda: {
            "status": {"loadBalancer": {"ingress": [{"hostname": f"{name}.elb.example"}]}}
        },
        "aws:ec2/launchTemplate:LaunchTemplate": lambda: {"latestVersion": 1},
        "random:index/randomPassword:RandomPassword": lambda: {"result": "not-a-secret"},
        "aws:route53/record:Record": lambda: {"fqdn": inputs.get("name", name)},
    }
    extra = fill.get(typ)
    return extra() if extra else {}


class RecordingMocks(pulumi.runtime.Mocks):
    """Mocks that record every resource and answer the program's few invokes."""

    def __init__(self) -> None:
        self.resources: list[Declared] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        ident = f"{args.name}-id"
        outputs = {
            "name": args.name,
            "arn": f"arn:aws:mock:::{args.name}",
            **args.inputs,
            **_computed(args.typ, args.name, args.inputs),
        }
        self.resources.append(Declared(args.typ, args.name, dict(args.inputs), ident))
        return ident, outputs

    def call(
        self, args: pulumi.runtime.MockCallArgs
    ) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        if args.token == "aws:index/getAvailabilityZones:getAvailabilityZones":
            region = args.args.get("region", "mock-1")
            return {"names": [f"{region}{z}" for z in "abcdef"]}, []
        return {}, []


def _ensure_event_loop() -> None:
    """Give Pulumi's runtime an open event loop on this thread.

    The SDK drives mocks through `asyncio.get_event_loop()`; code that ran earlier in the same
    process (`asyncio.run`, test frameworks) may have closed or unset the current loop.
    """
    try:
        loop = asyncio.get_event_loop_policy().get_event_loop()
    except RuntimeError:
        loop = None
    if loop is None or loop.is_closed():
        asyncio.set_event_loop(asyncio.new_event_loop())


def run_program(
    config: Mapping[str, Any], *, stack: str = "example", mocks: RecordingMocks | None = None
) -> RecordingMocks:
    """Run `infra.program.main` under mocks with `config` (a stack's `config:` block)."""
    mocks = mocks or RecordingMocks()
    _ensure_event_loop()
    pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=stack, preview=False)
    pulumi.runtime.set_all_config(
        {k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()}
    )

    @pulumi.runtime.test  # type: ignore[untyped-decorator]
    def program() -> None:
        main()

    program()
    return mocks
