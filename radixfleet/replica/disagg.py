"""The KV transfer of prefill/decode disaggregation: what a prompt's KV weighs and how long it
takes to move from a prefill replica to a decode replica.

SGLang's P/D roles (`--disaggregation-mode prefill|decode`) split one request in two: the
prefill replica runs the prompt and keeps its KV for the room smg named (`bootstrap_room`); the
decode replica fetches that KV through the prefill's bootstrap server
(`--disaggregation-bootstrap-port`) and a transfer engine (`--disaggregation-transfer-backend`),
then decodes. The emulated replica and the fleet twin both price the move with the functions
here, so the two hosts agree on it. Pure: no clock, no I/O.
"""

from __future__ import annotations

from typing import Literal, get_args

from radixfleet.profile import ReplicaProfile

# SGLang's names for a replica's role and its transfer engine (server-args.json, sglang
# 0.5.23). The emulator models the two engines that run on EFA/RDMA links; SGLang also has
# ascend, mori, mooncake_tcp and a fake one, none of which this fleet deploys.
DisaggregationMode = Literal["null", "prefill", "decode"]
TransferBackend = Literal["mooncake", "nixl"]

DISAGGREGATION_MODES: tuple[DisaggregationMode, ...] = get_args(DisaggregationMode)
TRANSFER_BACKENDS: tuple[TransferBackend, ...] = get_args(TransferBackend)
DEFAULT_TRANSFER_BACKEND: TransferBackend = "mooncake"
DEFAULT_BOOTSTRAP_PORT = 8998

# SGLang's decode side gives up on a room whose prefill never answers after this long
# (SGLANG_DISAGGREGATION_WAITING_TIMEOUT, 300 s); the emulator takes it as its default.
DEFAULT_ROOM_TIMEOUT_S = 300.0


def kv_bytes(profile: ReplicaProfile, tokens: int) -> int:
    """Bytes of the KV of `tokens` prompt tokens on the whole replica (every GPU's shard)."""
    if tokens < 0:
        raise ValueError(f"tokens must be >= 0, got {tokens}")
    return tokens * profile.kv_bytes_per_token


def transfer_seconds(profile: ReplicaProfile, tokens: int) -> float:
    """Seconds to move the KV of `tokens` prompt tokens from prefill to decode.

    Each GPU of the prefill replica sends its own shard over its own link (a p5 has one EFA
    NIC pair per GPU), so the shards move in parallel: a GPU's bytes over the per-GPU link,
    plus the setup every transfer pays. Nothing to move costs nothing.
    """
    if tokens == 0:
        return 0.0
    per_gpu = kv_bytes(profile, tokens) / profile.gpu_count
    return profile.kv_transfer_setup_s + per_gpu / (profile.kv_transfer_gb_s * 1e9)


def transfer_backend(name: str) -> TransferBackend:
    """`name` as a transfer backend; a ValueError names the ones the fleet models."""
    for backend in TRANSFER_BACKENDS:
        if backend == name:
            return backend
    known = ", ".join(TRANSFER_BACKENDS)
    raise ValueError(f"unknown disaggregation transfer backend {name!r}; known: {known}")


def disaggregation_mode(name: str) -> DisaggregationMode:
    """`name` as SGLang's disaggregation mode; a ValueError names the three."""
    for mode in DISAGGREGATION_MODES:
        if mode == name:
            return mode
    known = ", ".join(DISAGGREGATION_MODES)
    raise ValueError(f"unknown disaggregation mode {name!r}; known: {known}")
