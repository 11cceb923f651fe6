"""A region's prefill/decode pairs: the hand-over between a request's two replicas, and the
pools' sizes.

A P/D request is tracked on its prefill replica first (radixfleet/twin/pd.py sends it there
and names its decode replica); when the prefill replica answers, its KV travels for the link's
time (a TRANSFER event) and is then taken by the decode replica, which may hold it in its
prealloc queue until KV room frees. The request ends, and is scored, on the decode replica:
its TTFT holds the prefill, the transfer and that wait, its ITL the decode steps alone. A
request whose prefill or decode replica fails on the way fails as a colocated one would.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from radixfleet.replica import RejectedError, Request, RequestSpec
from radixfleet.twin.interfaces import PairScaler, ServiceObservation
from radixfleet.twin.log import Status
from radixfleet.twin.pd import DECODE, PREFILL, PairRouter, decode_spec
from radixfleet.twin.region_serving import RegionServing
from radixfleet.twin.scenario import PolicySet, Scenario
from radixfleet.twin.service import DRAINING, READY, Job, Replica, Revision, Service

# A request's KV on its way from its prefill replica to its decode replica (an event kind
# after region_base's ten).
TRANSFER = 10


class RegionPd(RegionServing):
    """The P/D part of a region; see the module docstring."""

    def __init__(
        self,
        *,
        scenario: Scenario,
        index: int,
        policies: PolicySet,
        spec_of: Callable[[int], RequestSpec],
        tenant_names: Sequence[str],
    ) -> None:
        super().__init__(
            scenario=scenario, index=index, policies=policies, spec_of=spec_of,
            tenant_names=tenant_names,
        )  # fmt: skip
        self._pairs: dict[int, PairRouter] = {}  # by model index
        self._in_transfer: dict[int, Job] = {}  # by request index: KV on the link

    def _attach_pair(self, service: Service, transfer_seconds: Callable[[int], float]) -> None:
        pair = service.model.disaggregation
        if pair is None:
            return
        seed = hash((self.scenario.seed, self.index, service.model_index, "decode")) & 0xFFFFFFFF
        router = PairRouter(pair, transfer_seconds=transfer_seconds, seed=seed)
        self._pairs[service.model_index] = router
        service.pair = router

    def _add_replica(
        self, service: Service, revision: Revision, t: float, *, boot: bool = True
    ) -> tuple[Replica, float] | None:
        router = self._pairs.get(service.model_index)
        role = None if router is None else router.role_for_new(revision)
        placed = super()._add_replica(service, revision, t, boot=boot)
        if placed is not None:
            placed[0].role = role
        return placed

    # -- the hand-over ---------------------------------------------------------------------

    def _done(self, replica: Replica, request: Request, t: float, *, ok: bool) -> None:
        if replica.role != PREFILL:
            super()._done(replica, request, t, ok=ok)
            return
        job, service = self._jobs.pop(request)
        replica.load -= 1
        service.outcome(replica, ok=ok, now=t)
        if not ok:
            self._give_up(job, service, t)
            return
        seconds = self._pairs[service.model_index].transfer_seconds(job.spec.prompt_tokens)
        self._in_transfer[job.index] = job
        self._push(t + seconds, TRANSFER, (job, service, request.cached_tokens))

    def _transferred(self, what: tuple[Job, Service, int], t: float) -> None:
        """The KV reached the decode replica: it takes the request (or it has died since)."""
        job, service, cached = what
        if self._in_transfer.pop(job.index, None) is None:
            return  # failed at the end of the run already
        decode = job.decode
        assert decode is not None
        model = decode.model
        if decode.state in (READY, DRAINING) and model is not None:
            try:
                request = model.submit(decode_spec(job.spec), now=t)
            except RejectedError:
                pass  # crashed or hung meanwhile: the request fails below
            else:
                request.cached_tokens = cached  # the prefill replica's hit, for the records
                self._jobs[request] = (job, service)
                self._replan(decode)
                return
        self._give_up(job, service, t)

    def _give_up(self, job: Job, service: Service, t: float) -> None:
        """A P/D request lost on the way: release its decode replica's count and fail it."""
        revision = service.revisions[job.revision]
        revision.count(-1, t)
        revision.finished += 1
        decode = job.decode
        if decode is not None:
            decode.load -= 1
            if decode.state == DRAINING and decode.load == 0:
                self._remove(decode, t)
        self.fail(job, Status.ABORTED, t)

    def _close_transfers(self, t: float) -> None:
        """End of the run: requests whose KV is still on the link are unfinished."""
        for job in self._in_transfer.values():
            self.fail(job, Status.UNFINISHED, t)
        self._in_transfer.clear()

    # -- the pools' sizes ------------------------------------------------------------------

    def _scale_pair(
        self, service: Service, revision: Revision, observed: ServiceObservation, t: float
    ) -> None:
        """Bring each pool of a pair to its target: a pair scaler's answer from each role's
        own observation, else the scenario's counts; none once retired."""
        router = self._pairs[service.model_index]
        scaler = revision.scaler
        if revision.retired:
            prefill, decode = 0, 0
        elif isinstance(scaler, PairScaler):
            prefill, decode = scaler.desired_pair(
                role_view(observed, PREFILL), role_view(observed, DECODE), t
            )
            prefill, decode = within(prefill, decode, service.model.max_replicas)
        else:
            prefill, decode = router.pair.prefill_replicas, router.pair.decode_replicas
        targets = {PREFILL: prefill, DECODE: decode}
        if targets != router.targets:
            self._record(t, "scale", service.model.name, f"pair {prefill}/{decode}")
        router.targets = targets
        for role, target in router.targets.items():
            self._resize_pool(service, revision, role, target, t)

    def _resize_pool(
        self, service: Service, revision: Revision, role: str, target: int, t: float
    ) -> None:
        active = [r for r in revision.active() if r.role == role]
        for _ in range(target - len(active)):
            if self._add_replica(service, revision, t) is None:
                break
        surplus = len(active) - target
        if surplus > 0:
            ranked = sorted(active, key=lambda r: (r.state == READY, -r.created_at, -r.id))
            for replica in ranked[:surplus]:
                self._drain(replica, t)


def role_view(observed: ServiceObservation, role: str) -> ServiceObservation:
    """`observed` narrowed to one role's replicas: their in-flight requests (a decode replica
    holds a request from its arrival to its end, a prefill replica during its prefill), and
    the requests buffered for the whole pair."""
    views = [view for view in observed.replicas if view.role == role]
    in_flight = sum(view.in_flight for view in views)
    mean = observed.mean_concurrency if role == DECODE else float(in_flight)
    return replace(observed, replicas=views, concurrency=in_flight, mean_concurrency=mean)


def within(prefill: int, decode: int, most: int) -> tuple[int, int]:
    """A pair's counts cut to `most` replicas together, keeping one of each role."""
    prefill = max(0, min(prefill, most - min(decode, 1)))
    return prefill, max(0, min(decode, most - prefill))
