"""Fair shares of a region entry's upstream connections, so that no tenant can starve another.

An entry sends every request upstream over one bounded pool of connections (the cluster entry's
`aiohttp` connector holds `UPSTREAM_CONNECTIONS`). Before these shares, one tenant's 130 long
streams filled the connector's 100 connections and two other tenants waited 24.4 s for a first
token. Each tenant that has a key now holds at most its share, the pool divided by the number of
tenants: what it sends past that is refused at once (429, retry in a second), so the others'
shares stay free. Pure counting, no I/O: the gate takes a slot before it reads a request's body
and gives it back when the answer has ended.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from radixfleet.platform import UPSTREAM_CONNECTIONS


@dataclass
class ConcurrencyShares:
    """Requests under way, by tenant, against each tenant's share of `pool`."""

    pool: int = UPSTREAM_CONNECTIONS
    in_flight: Counter[str] = field(default_factory=Counter)

    def share(self, tenants: int) -> int:
        """One tenant's share when `tenants` tenants have keys (at least one request)."""
        return max(1, self.pool // max(1, tenants))

    def take(self, tenant: str, *, tenants: int) -> bool:
        """Count one more request of `tenant`; False (and nothing counted) past its share."""
        if self.in_flight[tenant] >= self.share(tenants):
            return False
        self.in_flight[tenant] += 1
        return True

    def give_back(self, tenant: str) -> None:
        self.in_flight[tenant] -= 1
        if self.in_flight[tenant] <= 0:
            del self.in_flight[tenant]
