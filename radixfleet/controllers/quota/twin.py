"""Token budgets in the fleet twin: the request path's own `TokenLedger`, in virtual time.

`token_budgets` (a twin admission-policy factory, named in a scenario as
`radixfleet.controllers.quota.twin:token_budgets`) enforces each scenario tenant's `token_budget`
with the ledger that `gate.TokenGate` drives on a region's entry, moved the same three ways:

1. `admit`: the prompt and the completion's cap (`max_new_tokens`, reserved) are charged when
   the request reaches the region; a throttled request ends there with 429 (the twin logs it as
   THROTTLED, refused by policy, not failed by the fleet);
2. the completion is charged when the request ends (the gate charges it chunk by chunk as it
   streams; the twin has no chunks, so a stream's debt lands at its end, a few seconds late);
3. `settle` with the exact usage; a request that failed before serving anything gives its
   prompt back, as the gate does for an error answer without usage.

Each region builds its own ledger, as each region's entry runs its own gate: a tenant's budget
holds per region.
"""

from __future__ import annotations

from radixfleet.controllers.quota.ledger import Throttled, Ticket, TokenLedger
from radixfleet.twin.registry import PolicyContext


class TwinTokenGate:
    """An AdmissionPolicy and UsageMeter over one region's `TokenLedger`."""

    def __init__(self, ledger: TokenLedger, models: dict[str, str]) -> None:
        self.ledger = ledger
        self.models = models  # tenant -> the model it sends to (per-model budgets)
        self.throttled: dict[str, int] = {}
        self._last: Ticket | None = None
        self._open: dict[int, Ticket] = {}

    def admit(self, tenant: str, prompt_tokens: int, now: float, *, reserve: int = 0) -> bool:
        """Charge the prompt and reserve the completion's cap, or refuse (429) while the
        tenant's bucket cannot cover them."""
        model = self.models[tenant]
        result = self.ledger.admit(tenant, model, prompt_tokens, now=now, reserve=reserve)
        if isinstance(result, Throttled):
            self.throttled[tenant] = self.throttled.get(tenant, 0) + 1
            return False
        self._last = result
        return True

    def admitted(self, key: int) -> None:
        """Keep the ticket `admit` just issued under the request's key, to settle it later."""
        assert self._last is not None, "admitted() without a successful admit()"
        self._open[key], self._last = self._last, None

    def settle(self, key: int, output_tokens: int, *, ok: bool, now: float) -> None:
        """Charge the completion and settle the ticket with the exact usage."""
        ticket = self._open.pop(key, None)
        if ticket is None:
            return
        refund_prompt = not ok and output_tokens == 0
        prompt = 0 if refund_prompt else ticket.prompt
        self.ledger.charge(ticket, output_tokens, now=now)
        self.ledger.settle(ticket, prompt=prompt, completion=output_tokens, now=now)


def token_budgets(ctx: PolicyContext) -> TwinTokenGate:
    """Twin factory: every scenario tenant's `token_budget` (None: metered, never throttled)."""
    tenants = ctx.scenario.tenants
    ledger = TokenLedger(budgets={t.name: t.token_budget for t in tenants})
    return TwinTokenGate(ledger, {t.name: t.model for t in tenants})
