"""The LoRA controller's policy: how much demand one loaded copy of an adapter serves, and the
margins that keep its decisions from flapping.

The controller has no custom resource: what it places (the adapters, their tenants, the bound
of each replica) is the catalog's (`models[].lora_adapters`, `max_loaded_loras`), and the policy
below is one per operator, with its defaults here, on the type.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

NAME = "lora"


@dataclass(frozen=True)
class AdapterPolicy:
    """How the LoRA controller sizes each adapter's copies.

    - `rps_per_copy`: requests per second one replica's copy of an adapter serves before a
      second copy is worth a slot (S-LoRA's batches mix adapters, so this is a share, not a
      limit).
    - `keep_band`: a copy is dropped only when the demand would fit in one copy fewer with this
      much room to spare (0.5: at 1.5 copies' worth, two are kept): hysteresis.
    - `min_hold_s`: a copy loaded more recently than this is not unloaded for lack of demand
      (a load costs seconds of a replica's time; a burst's end is not its last).
    - `idle_unload_s`: an adapter with no request for this long is unloaded everywhere.
    """

    rps_per_copy: float = 2.0
    keep_band: float = 0.5
    min_hold_s: float = 60.0
    idle_unload_s: float = 300.0

    def __post_init__(self) -> None:
        if not (self.rps_per_copy > 0 and math.isfinite(self.rps_per_copy)):
            raise ValueError(f"rps_per_copy must be a positive number, not {self.rps_per_copy}")
        if not 0 <= self.keep_band <= 10:
            raise ValueError(f"keep_band must be within 0..10, not {self.keep_band}")
        if self.min_hold_s < 0 or self.idle_unload_s < 0:
            raise ValueError("min_hold_s and idle_unload_s must not be negative")
