"""`radixfleet canary status|pause|resume|promote|abort NAME [-n NS]`, and `run` for the controller.

NAME is the InferenceService. Commands are annotations on the CanaryPolicy it names, keyed by
the InferenceService and, for promote, abort and approvals, by the canary revision they are for
(see radixfleet/controllers/canary/spec.py for why not on the InferenceService). The controller acts
on its next tick.

`radixfleet --help` imports this module, so it imports only typer and rich at the top: the spec
types (pydantic models), the Prometheus adapter (requests) and the Kubernetes client are
imported by the commands that use them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from radixfleet.kit.commands import (
    NAMESPACES,
    PROMETHEUS,
    Namespace,
    add_run,
    console,
    fail,
    print_lines,
)

if TYPE_CHECKING:
    from rich.table import Table

    from radixfleet.controllers.canary.ports import CanaryPolicies, InferenceServices
    from radixfleet.controllers.canary.state import RolloutStatus

canary_app = typer.Typer(
    name="canary",
    help="Watch and steer metric-gated rollouts of InferenceServices.",
    no_args_is_help=True,
)

Name = Annotated[str, typer.Argument(help="The InferenceService.")]


@dataclass(frozen=True)
class Ports:
    """What the commands need from the cluster; tests pass fakes as typer's `obj`."""

    isvcs: InferenceServices
    policies: CanaryPolicies


@dataclass(frozen=True)
class Target:
    """An InferenceService, the policy it names and its current rollout."""

    isvc: dict[str, Any]
    policy: dict[str, Any]
    canary_revision: str | None
    rollout: RolloutStatus | None

    @property
    def policy_name(self) -> str:
        return str(self.policy["metadata"]["name"])


@canary_app.callback()
def _main(ctx: typer.Context) -> None:
    """Commands reach the cluster only when they run (`--help` and `run` need no client here)."""


@canary_app.command()
def status(ctx: typer.Context, name: Name, namespace: Namespace = "default") -> None:
    """Show a rollout: phase, weight, revisions, last decision and the numbers behind it."""
    target = _target(_ports(ctx), namespace, name)
    if target.rollout is None:
        console.print(f"{namespace}/{name}: no rollout under policy {target.policy_name} yet")
        return
    print_lines(describe(target.rollout, target.policy))
    console.print(checks_table(target.rollout))


@canary_app.command()
def pause(ctx: typer.Context, name: Name, namespace: Namespace = "default") -> None:
    """Hold the rollout where it is: no step, no promotion, no rollback."""
    from radixfleet.controllers.canary.spec import PAUSE_PREFIX

    _annotate(_ports(ctx), namespace, name, {PAUSE_PREFIX: "true"}, "paused")


@canary_app.command()
def resume(ctx: typer.Context, name: Name, namespace: Namespace = "default") -> None:
    """Lift a pause, and approve the next step if it waits at a manual gate."""
    from radixfleet.controllers.canary.spec import APPROVE_PREFIX, PAUSE_PREFIX

    target = _target(_ports(ctx), namespace, name)
    values: dict[str, str | None] = {PAUSE_PREFIX: None}
    approval = next_approval(target)
    if approval is not None:
        values[APPROVE_PREFIX] = approval
    done = "resumed" if approval is None else f"resumed, {approval} approved"
    _write(_ports(ctx), target, name, values, done)


@canary_app.command()
def promote(ctx: typer.Context, name: Name, namespace: Namespace = "default") -> None:
    """Promote the current canary now, whatever its analysis says."""
    from radixfleet.controllers.canary.spec import PROMOTE_PREFIX

    target = _target(_ports(ctx), namespace, name)
    _write(_ports(ctx), target, name, {PROMOTE_PREFIX: _canary(target)}, "promotion requested")


@canary_app.command()
def abort(ctx: typer.Context, name: Name, namespace: Namespace = "default") -> None:
    """Roll the current canary back now: 0% and the stable revision keeps serving."""
    from radixfleet.controllers.canary.spec import ABORT_PREFIX

    target = _target(_ports(ctx), namespace, name)
    _write(_ports(ctx), target, name, {ABORT_PREFIX: _canary(target)}, "rollback requested")


add_run(
    canary_app, "radixfleet.controllers.canary.plugin:PLUGIN", shared=[NAMESPACES, PROMETHEUS],
    help="Run the canary controller (kopf) until interrupted.",
)  # fmt: skip


def next_approval(target: Target) -> str | None:
    """`REVISION@WEIGHT` approving the step a rollout waits at, or None if it waits at none."""
    from radixfleet.controllers.canary.spec import CanaryPolicySpec
    from radixfleet.controllers.canary.state import Phase

    rollout = target.rollout
    if rollout is None or rollout.phase is not Phase.AWAITING_APPROVAL:
        return None
    spec = CanaryPolicySpec.model_validate(target.policy.get("spec") or {})
    return f"{rollout.canary_revision}@{spec.next_step(rollout.weight)}"


def describe(rollout: RolloutStatus, policy: Mapping[str, Any]) -> list[str]:
    """The rollout in a few lines, as `canary status` prints them."""
    from radixfleet.controllers.canary.spec import CanaryPolicySpec

    spec = CanaryPolicySpec.model_validate(policy.get("spec") or {})
    lines = [
        f"{rollout.inference_service}: {rollout.phase} at {rollout.weight}% "
        f"(steps {spec.steps}, policy {policy['metadata']['name']})",
        f"canary {rollout.canary_revision}, stable {rollout.stable_revision or '-'}",
        f"failed analyses {rollout.failed_checks} of {spec.threshold}",
    ]
    if rollout.last_decision is not None:
        decision = rollout.last_decision
        lines.append(
            f"last decision {decision.action} at {decision.at:%H:%M:%S}: {decision.reason}"
        )
    return lines


def checks_table(rollout: RolloutStatus) -> Table:
    """The last analysis: each check's canary and stable values, its bound and verdict."""
    from rich.table import Table

    table = Table("check", "canary", "stable", "bound", "verdict", title="last analysis")
    for check in rollout.checks:
        stable = "-" if check.stable is None else f"{check.stable:.4g}"
        verdict = "pass" if check.passed else "FAIL"
        table.add_row(check.metric, f"{check.canary:.4g}", stable, f"{check.bound:.4g}", verdict)
    if rollout.measured is not None:
        served = rollout.measured.canary.requests, rollout.measured.stable.requests
        table.add_row("requests", *(_fmt(n) for n in served), "", "")
    return table


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _target(ports: Ports, namespace: str, name: str) -> Target:
    from radixfleet.controllers.canary.observe import observe_isvc
    from radixfleet.controllers.canary.ports import policy_name
    from radixfleet.controllers.canary.state import rollout_of

    isvc = next(
        (i for i in ports.isvcs.in_namespace(namespace) if i["metadata"]["name"] == name), None
    )
    if isvc is None:
        fail(f"InferenceService {namespace}/{name} not found")
    policy_ref = policy_name(isvc)
    if policy_ref is None:
        fail(f"{namespace}/{name} names no CanaryPolicy (annotation radixfleet.io/canary-policy)")
    policy = ports.policies.get(namespace, policy_ref)
    if policy is None:
        fail(f"CanaryPolicy {namespace}/{policy_ref} not found")
    observed = observe_isvc(isvc)
    return Target(isvc, policy, observed.canary_revision, rollout_of(policy, name))


def _canary(target: Target) -> str:
    if target.canary_revision is None:
        fail(f"{target.isvc['metadata']['name']} has no revision being rolled out")
    return target.canary_revision


def _annotate(
    ports: Ports, namespace: str, name: str, values: Mapping[str, str | None], done: str
) -> None:
    _write(ports, _target(ports, namespace, name), name, values, done)


def _write(
    ports: Ports, target: Target, name: str, values: Mapping[str, str | None], done: str
) -> None:
    from radixfleet.controllers.canary.spec import command_key
    from radixfleet.kit.errors import KubeError

    annotations = {command_key(prefix, name): value for prefix, value in values.items()}
    namespace = target.policy["metadata"]["namespace"]
    try:
        ports.policies.annotate(namespace, target.policy_name, annotations)
    except KubeError as error:
        fail(str(error))
    console.print(f"{namespace}/{name}: {done}; the controller acts on its next tick")


def _ports(ctx: typer.Context) -> Ports:
    """The ports a test put in the context, else the cluster's (built once per command)."""
    if ctx.obj is None:
        ctx.obj = _kube_ports()
    ports: Ports = ctx.obj
    return ports


def _kube_ports() -> Ports:
    from kubernetes.config import ConfigException

    from radixfleet.controllers.canary.controller import kube_controller

    try:
        controller = kube_controller()
    except ConfigException as error:
        typer.echo(
            f"error: no Kubernetes configuration (in-cluster or kubeconfig): {error}", err=True
        )
        raise typer.Exit(2) from None
    return Ports(isvcs=controller.isvcs, policies=controller.policies)
