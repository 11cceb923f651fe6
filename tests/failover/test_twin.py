"""The failover's twin adapter: observations in, the twin's traffic matrix and floors out."""

from __future__ import annotations

from radixfleet.controllers.failover.twin import RadixfleetFailover, default_spec
from radixfleet.twin.interfaces import FleetObservation, RegionObservation

REGIONS = ["a", "b", "c"]


def _fleet(down: str | None = None, ready: int = 3) -> FleetObservation:
    return FleetObservation(
        [
            RegionObservation(
                name,
                endpoint_up=name != down,
                requests=100,
                failed=0,
                ttft_ok=100,
                ready_replicas=ready,
                active_replicas=ready,
            )
            for name in REGIONS
        ]
    )


def test_a_dead_region_is_weighted_out_with_floors_raised_elsewhere() -> None:
    policy = RadixfleetFailover(default_spec(REGIONS, ["llama"]))
    assert policy.decide(_fleet(), 0.0).weights["a"] == {"a": 1.0}
    policy.decide(_fleet(down="a"), 10.0)
    decision = policy.decide(_fleet(down="a"), 20.0)
    assert decision.weights["a"] == {"a": 0.0, "b": 0.5, "c": 0.5}
    assert decision.weights["b"] == {"b": 1.0}
    assert decision.min_replicas == {("b", "llama"): 6, ("c", "llama"): 6}  # ceil(9/2 x 1.2)
    assert policy.ttl_s == 10.0


def test_a_recovered_region_comes_back_in_steps() -> None:
    policy = RadixfleetFailover(default_spec(REGIONS, ["llama"]))
    policy.decide(_fleet(), 0.0)
    for t in (10.0, 20.0):
        policy.decide(_fleet(down="a"), t)
    # Back up with replicas for its raised floor (ceil(9/3 x 1.2) = 4).
    shares = [
        policy.decide(_fleet(ready=4), 30.0 + 10 * k).weights["a"].get("a", 0.0) for k in range(30)
    ]
    assert shares[0] == 0.0
    back = [s for s in shares if 0 < s < 1]
    assert back and back == sorted(back)
    assert shares[-1] == 1.0
