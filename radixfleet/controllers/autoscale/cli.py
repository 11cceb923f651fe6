"""`radixfleet autoscale status NAME [-n NS]` and `radixfleet autoscale run` (the controller).

NAME is the AutoscalePolicy (by convention named after its InferenceService). `status` prints
the last decision, what each signal asked for, the bounds and what was learned about a replica.
"""

from __future__ import annotations

from typing import Annotated

import typer

from radixfleet.controllers.autoscale.state import AutoscaleStatus, BreakEven, status_of
from radixfleet.kit.commands import NAMESPACES, PROMETHEUS, Namespace, add_run, show_status
from radixfleet.kit.plugin import Deferred

autoscale_app = typer.Typer(
    name="autoscale",
    help="Watch and run the autoscaler of InferenceServices (AutoscalePolicy).",
    no_args_is_help=True,
)

Name = Annotated[str, typer.Argument(help="The AutoscalePolicy.")]
KUBE_POLICIES = Deferred("radixfleet.controllers.autoscale.kube:KubeAutoscalePolicies")


@autoscale_app.command()
def status(ctx: typer.Context, name: Name, namespace: Namespace = "default") -> None:
    """Show a policy's last decision and the numbers behind it."""
    show_status(ctx, kind="AutoscalePolicy", store=KUBE_POLICIES, namespace=namespace,
                name=name, status_of=status_of, describe=describe)  # fmt: skip


add_run(
    autoscale_app, "radixfleet.controllers.autoscale.plugin:PLUGIN",
    shared=[NAMESPACES, PROMETHEUS], metrics_port=9464,
    help="Run the autoscaler (kopf) until interrupted.",
)  # fmt: skip


def describe(recorded: AutoscaleStatus) -> list[str]:
    """The status in a few lines, as `autoscale status` prints them."""
    demand, learned = recorded.demand, recorded.learned
    lines = [
        f"{recorded.inference_service} (revision {recorded.revision or '-'}): desired "
        f"{recorded.desired}, bounds {demand.floor}..{demand.ceiling}",
        f"demand in replicas: itl {demand.itl:.2f}, kv {demand.kv:.2f}, batch "
        f"{demand.running:.2f}, latency {demand.latency:.2f}, predicted {demand.predicted:.2f}",
        f"learned: {_fmt(learned.replica_rps)} req/s per replica, saturation batch "
        f"{_fmt(learned.batch)}, cold-start share {recorded.cold.share:.2%}",
    ]
    if recorded.break_even is not None:
        lines.append(_break_even(recorded.break_even))
    if recorded.last_decision is not None:
        last = recorded.last_decision
        lines.append(f"last decision {last.action} at {last.at:%H:%M:%S}: {last.reason}")
    return lines


def _break_even(found: BreakEven) -> str:
    trip = f"a trip to zero costs {found.zero_cost_seconds:.0f} replica-s"
    if found.gaps == 0:
        return f"scale to zero: {trip}; no idle gap seen yet"
    when = "never (stays warm)" if found.never else f"after {found.idle_seconds:.0f} s idle"
    return (f"scale to zero: {when}; {trip}, mean idle gap {_fmt(found.mean_gap_seconds)} s "
            f"over {found.gaps}")  # fmt: skip


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"
