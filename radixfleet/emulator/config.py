"""What one emulated replica is started with (SGLang's `launch_server` flags, as the emulator
reads them); its own module, so the parts that read it need not import the server."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from radixfleet.emulator.bootstrap import DisaggConfig
from radixfleet.emulator.hicache import HiCacheConfig
from radixfleet.profile import ReplicaProfile
from radixfleet.replica import SchedulePolicy


@dataclass(frozen=True)
class EmulatorConfig:
    """Everything one emulated replica is started with."""

    profile: ReplicaProfile
    served_model_name: str | None = None
    api_key: str | None = None
    host: str = "127.0.0.1"
    port: int = 30000
    enable_metrics: bool = True
    warm: bool = False  # skip the cold start
    block_tokens: int = 16
    schedule_policy: SchedulePolicy = SchedulePolicy.FCFS
    stream_interval: float = 0.02
    health_timeout: float = 20.0
    cache_dir: Path | None = None
    seed: int = 0
    grpc_port: int | None = None  # serve SGLang's gRPC protocol there too (0: any free port)
    lora_adapters: tuple[str, ...] = ()  # the names `--lora-paths` loaded
    hicache: HiCacheConfig | None = None  # `--enable-hierarchical-cache` and its flags
    disaggregation: DisaggConfig | None = None  # a P/D role (`--disaggregation-mode`)

    @property
    def model_name(self) -> str:
        """The name clients use (SGLang's --served-model-name, defaulting to the model path)."""
        return self.served_model_name or self.profile.model_path

    @property
    def engine_type(self) -> str:
        """SGLang's `engine_type` metric label: the P/D role, or "unified"."""
        return "unified" if self.disaggregation is None else self.disaggregation.mode
