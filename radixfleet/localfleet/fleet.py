"""The local fleet: regions on loopback, each with an entry, a router per model and replicas.

`LocalFleet` runs its own event loop on a background thread: the region entries (aiohttp
servers in this process), the replica sets that reconcile emulator processes, and the HTTP
session they share. Routers, replicas and Prometheus are child processes under one
`Supervisor`, so `stop()` (or a signal, or interpreter exit) leaves nothing behind.

Its methods are thread-safe and synchronous, for tests, the demo and controllers that run
elsewhere; `run(coro)` runs a coroutine on the fleet's loop, where a controller can drive the
`Scaler`s (`scaler(region, model)`) directly.

Revisions stand in for KServe's: a model serves from its stable revision, and
`create_revision` starts a canary revision beside it (its own router and replicas, pinned at
0%) whose share of the entry's traffic `set_canary_percent` moves, as `canaryTrafficPercent`
does. `promote` makes the canary the stable revision and retires the old one; a rollback is
`set_canary_percent(..., 0)`, which keeps the canary's replicas, as KServe does.

The class is put together from its parts: `core` (state, lifecycle, accessors, scrape targets),
`revisions`, `chaos` and `monitoring`; `runtime` holds what they share.
"""

from __future__ import annotations

from radixfleet.localfleet.chaos import LocalFleetChaos
from radixfleet.localfleet.monitoring import LocalFleetMonitoring
from radixfleet.localfleet.revisions import LocalFleetRevisions
from radixfleet.localfleet.runtime import LocalFleetError, RevisionStatus

__all__ = ["LocalFleet", "LocalFleetError", "RevisionStatus"]


class LocalFleet(LocalFleetRevisions, LocalFleetChaos, LocalFleetMonitoring):
    """A fleet of emulated regions on this machine; a context manager that stops everything."""
