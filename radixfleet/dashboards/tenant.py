"""The Tenant dashboard: token and GPU use against each tenant's budgets, and throttling."""

from __future__ import annotations

from grafana_foundation_sdk.models.dashboard import Dashboard

from radixfleet import metrics_names as m
from radixfleet.dashboards import sli
from radixfleet.dashboards.panels import Board, Filter, Q
from radixfleet.dashboards.uids import TENANT_UID

SEL = '{tenant=~"$tenant"}'


def build() -> Dashboard:
    """Per tenant: usage, budgets, and the requests refused for lack of budget."""
    board = Board(
        uid=TENANT_UID,
        title="radixfleet / Tenants",
        description="Token-rate and GPU budgets of each tenant, what it uses of them, and "
        "throttled requests.",
        filters=[Filter("tenant", m.TENANT, m.TENANT_TOKEN_BUDGET.name, "Tenant")],
    )
    _tokens(board.row("Tokens"))
    _gpus(board.row("GPUs"))
    return board.build()


def _tokens(board: Board) -> None:
    board.timeseries(
        "Tokens per minute against budget",
        [
            Q(f"{sli.TENANT_TOKENS_PER_MINUTE}{SEL}", "{{tenant}} used"),
            Q(f"max by (tenant) ({m.TENANT_TOKEN_BUDGET.name}{SEL})", "{{tenant}} budget"),
        ],
        unit="short",
        description="Tokens charged per minute (prompt on admission, completion while streaming) "
        "and the tenant's budget.",
    )
    board.timeseries(
        "Token budget used",
        [Q(f"{sli.TENANT_TOKEN_BUDGET_RATIO}{SEL}", "{{tenant}}")],
        unit="percentunit",
        description="Tokens per minute over the budget; at 100% requests are throttled.",
    )
    board.timeseries(
        "Tokens per minute by model",
        [
            Q(
                f"sum by (tenant, model_name, kind) (rate({m.TENANT_TOKENS.name}{SEL}[5m])) * 60",
                "{{tenant}} {{model_name}} {{kind}}",
            )
        ],
        unit="short",
        stacked=True,
        description="Where each tenant's tokens go: per model, prompt and completion.",
    )
    board.timeseries(
        "Throttled requests",
        [Q(f"sum by (tenant) ({sli.TENANT_THROTTLED_RATE}{SEL})", "{{tenant}}")],
        unit="reqps",
        description="Requests refused with HTTP 429 because the token budget was spent.",
    )


def _gpus(board: Board) -> None:
    budget = m.TENANT_GPU_BUDGET.name
    board.timeseries(
        "GPUs committed against budget",
        [
            Q(
                f"sum by (tenant, gpu_type) ({m.TENANT_GPUS_COMMITTED.name}{SEL})",
                "{{tenant}} {{gpu_type}} committed",
            ),
            Q(
                f'max by (tenant, gpu_type) ({budget}{{tenant=~"$tenant", kind="guaranteed"}})',
                "{{tenant}} {{gpu_type}} guaranteed",
            ),
            Q(
                f"sum by (tenant, gpu_type) (max by (tenant, gpu_type, kind) ({budget}{SEL}))",
                "{{tenant}} {{gpu_type}} limit",
            ),
        ],
        unit="short",
        width=8,
        description="GPUs admitted counting every InferenceService's maxReplicas, against the "
        "guaranteed budget and the limit (guaranteed plus borrowable).",
    )
    board.timeseries(
        "GPU budget used",
        [Q(f"{sli.TENANT_GPU_BUDGET_RATIO}{SEL}", "{{tenant}} {{gpu_type}}")],
        unit="percentunit",
        width=8,
        description="GPUs committed over the limit; at 100% admission refuses more.",
    )
    board.timeseries(
        "GPUs in use",
        [Q(f"{sli.TENANT_GPUS_IN_USE}{SEL}", "{{tenant}} {{region}}")],
        unit="short",
        width=8,
        stacked=True,
        description="GPUs held by the tenant's running pods, per region (kube-state-metrics).",
    )
