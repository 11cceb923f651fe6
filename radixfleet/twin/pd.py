"""A model served as a prefill/decode pair: smg's PD mode picking both workers of a request.

smg 1.13 in PD mode (`--pd-disaggregation`) picks, for each request, a prefill worker with its
prefill policy (here the policy set's routing, cache-aware by default, over the prefill
replicas) and a decode worker with its decode policy (`power_of_two`: the less loaded of two
drawn at random; or `least_load`), and sends the request to both with one bootstrap room. The
prefill replica runs the prompt alone (it answers one token: SGLang's prefill server stops
there) and the KV moves to the decode replica over the link
(:mod:`radixfleet.replica.disagg`), where it waits for KV room in the replica's queue
(SGLang's prealloc queue) and then decodes with no prefill pass
(`RequestSpec.transferred_tokens`). The region plays the hand-over
(:mod:`radixfleet.twin.region_pd`); here are the choices and the request's two shapes.

The prefill replica frees the prompt's KV when it answers; SGLang's holds it until the transfer
ends, which needs memory there only while the link is busy (a small share at these rates).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial

from radixfleet.profile import ReplicaProfile
from radixfleet.replica import RejectedError, RejectReason, RequestSpec
from radixfleet.replica.disagg import transfer_seconds
from radixfleet.twin.log import Status
from radixfleet.twin.scenario import Disaggregation
from radixfleet.twin.service import DRAINING, Job, Replica, Revision, Service

PREFILL, DECODE = "prefill", "decode"


def prefill_spec(spec: RequestSpec) -> RequestSpec:
    """What the prefill replica runs: the prompt, answering its first token only. Its answer
    is the decode replica's, so the prefill replica caches the prompt alone."""
    return replace(spec, output_tokens=1, max_new_tokens=1, finish_blocks=None)


def decode_spec(spec: RequestSpec) -> RequestSpec:
    """What the decode replica runs: the whole answer over the prompt's KV, all of it sent by
    the prefill replica (`transferred_tokens`: room on the GPU, no prefill pass); its radix
    tree shares none of it (no prefix is matched on a decode server)."""
    return replace(
        spec, prompt_blocks=(), finish_blocks=None, transferred_tokens=spec.prompt_tokens
    )


def transfer_time(profile: ReplicaProfile) -> Callable[[int], float]:
    """Seconds a prompt's KV takes from a prefill to a decode replica of `profile`
    (radixfleet/replica/disagg.py, as the emulated replica prices it)."""
    return partial(transfer_seconds, profile)


class PairRouter:
    """smg's PD mode in front of one service's prefill and decode replicas."""

    def __init__(
        self,
        pair: Disaggregation,
        *,
        transfer_seconds: Callable[[int], float],
        seed: int,
    ) -> None:
        self.pair = pair
        self.transfer_seconds = transfer_seconds
        self.targets = {PREFILL: pair.prefill_replicas, DECODE: pair.decode_replicas}
        self._draws = random.Random(seed)

    def serving(self, revision: Revision) -> bool:
        """A request can be sent only when both roles have a routable replica."""
        roles = {replica.role for replica in revision.routable}
        return PREFILL in roles and DECODE in roles

    def role_for_new(self, revision: Revision) -> str:
        """The role a new replica of `revision` takes: the pool furthest below its target,
        prefill first (a decode replica without a prefill peer would idle)."""
        active = revision.active()
        short = {
            role: self.targets[role] - sum(1 for r in active if r.role == role)
            for role in (PREFILL, DECODE)
        }
        return PREFILL if short[PREFILL] >= short[DECODE] else DECODE

    def pick_decode(self, workers: Sequence[Replica]) -> Replica:
        """The decode policy's choice among `workers` (never empty)."""
        if self.pair.decode_policy == "least_load" or len(workers) == 1:
            return min(workers, key=lambda r: (r.load, r.id))
        first, second = self._draws.sample(range(len(workers)), 2)
        a, b = workers[first], workers[second]
        return a if a.load <= b.load else b

    def dispatch(self, service: Service, job: Job, revision: Revision, now: float) -> None:
        """Route `job` as smg's PD mode does, retrying refusals of the prefill replica as
        Service.dispatch does for a colocated one."""
        spec = job.spec
        for _ in range(service.max_attempts):
            workers = [r for r in revision.routable if service.allows(r, now)]
            prefills = [r for r in workers if r.role == PREFILL]
            decodes = [r for r in workers if r.role == DECODE and r.state != DRAINING]
            if not prefills or not decodes:
                break
            prefill = prefills[revision.router.select(spec, prefills, now)]
            model = prefill.model
            assert model is not None
            try:
                request = model.submit(prefill_spec(spec), now=now)
            except RejectedError as err:
                if err.reason is RejectReason.TOO_LONG:
                    service.region.fail(job, Status.TOO_LONG, now)
                    return
                if service.refused(err, prefill, revision, now):
                    break
                continue
            decode = self.pick_decode(decodes)
            job.decode = decode
            prefill.load += 1
            decode.load += 1  # smg counts the request on both workers until it ends
            revision.count(1, now)
            service.region.track(request, job, prefill, service)
            return
        service.region.fail(job, Status.SERVER_ERROR, now)
