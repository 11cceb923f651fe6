"""The local fleet: regions on loopback, emulated SGLang replicas behind real SGLang gateways.

- `spec`: the typed fleet spec (regions, models, replica counts, clocks) and `demo_spec()`;
- `fleet`: `LocalFleet`, which starts and stops everything and is what tests, the demo and the
  controllers drive (scale a model in a region, inject faults, take a region down), put
  together from `core` (state, lifecycle, accessors, scrape targets), `revisions` (canaries,
  baselines, promotion), `chaos` and `monitoring` (its Prometheus servers), over `runtime`
  (what a started region is made of, and the waits they share);
- `scaler`: the `Scaler` port of one model in one region (what the autoscaler acts through);
- `replicas`: `ReplicaSet`, the `Scaler` backed by emulator processes registered with a router;
- `pairs`: `PairSet`, the `Scaler` of a prefill/decode model: its two roles' replica sets behind
  one smg in PD mode, scaled as one by the pair rule the fleet is given;
- `entry`: a region's request entry, routing by model and waking models from zero;
- `router`: the SGLang gateway (smg) as a child process and its worker API;
- `procs`: child processes that never outlive the fleet;
- `prometheus`: the scrape config the fleet writes, and Debian's Prometheus when installed.

`radixfleet demo`, which runs it, is an app of its own (radixfleet/demo/).
"""

from radixfleet.localfleet.fleet import LocalFleet, LocalFleetError
from radixfleet.localfleet.scaler import ReplicaInfo, ReplicaState, Scaler
from radixfleet.localfleet.spec import LocalFleetSpec, ModelSpec, RegionSpec, demo_spec

__all__ = [
    "LocalFleet",
    "LocalFleetError",
    "LocalFleetSpec",
    "ModelSpec",
    "RegionSpec",
    "ReplicaInfo",
    "ReplicaState",
    "Scaler",
    "demo_spec",
]
