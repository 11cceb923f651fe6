"""`radixfleet emulate`: run one emulated SGLang replica until interrupted.

A plain function with typer annotations; `radixfleet.cli` registers it as a command.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated

import typer
from aiohttp import web

from radixfleet.emulator.bootstrap import disagg_config
from radixfleet.emulator.config import EmulatorConfig
from radixfleet.emulator.hicache import HiCacheConfig, storage_tokens
from radixfleet.emulator.server import Emulator
from radixfleet.profile import BUILTIN_PROFILES, ProfileError, resolve_profile
from radixfleet.replica import SchedulePolicy
from radixfleet.replica.disagg import DEFAULT_BOOTSTRAP_PORT, DEFAULT_TRANSFER_BACKEND
from radixfleet.replica.tiers import WritePolicy

#: SGLang listens with a large backlog; a thousand clients connecting at once must all get in.
LISTEN_BACKLOG = 4096


def emulate(
    port: Annotated[int, typer.Option(help="TCP port to listen on.")] = 30000,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    profile: Annotated[
        str | None,
        typer.Option(
            help=f"Replica profile: a YAML file or a built-in ({', '.join(BUILTIN_PROFILES)})."
        ),
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="Served model name (default: the profile's model path).")
    ] = None,
    api_key: Annotated[
        str | None, typer.Option(help="Require 'Authorization: Bearer KEY', as SGLang does.")
    ] = None,
    warm: Annotated[bool, typer.Option(help="Skip the cold start: healthy at once.")] = False,
    time_scale: Annotated[
        float, typer.Option(help="Multiply every step and cold-start time (0.1: ten times faster).")
    ] = 1.0,
    max_queued_requests: Annotated[
        int | None, typer.Option(help="Queue bound; beyond it requests get 503.")
    ] = None,
    schedule_policy: Annotated[
        SchedulePolicy, typer.Option(help="Admission order of waiting requests.")
    ] = SchedulePolicy.FCFS,
    enable_metrics: Annotated[bool, typer.Option(help="Serve /metrics.")] = True,
    cache_dir: Annotated[
        Path | None, typer.Option(help="Where the tokenizer is built (default: user cache).")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the injected error draws.")] = 0,
    grpc_port: Annotated[
        int | None,
        typer.Option(help="Also serve SGLang's gRPC protocol (smg-grpc-proto) on this port."),
    ] = None,
    lora_adapter: Annotated[
        list[str] | None,
        typer.Option(help="A LoRA adapter requests may name (repeat for several)."),
    ] = None,
    enable_hierarchical_cache: Annotated[
        bool,
        typer.Option(
            "--enable-hierarchical-cache",
            "--enable-hicache",
            help="SGLang HiCache: keep KV blocks the GPU evicts in a host tier.",
        ),
    ] = False,
    hicache_size: Annotated[
        int, typer.Option(help="Host tier in GB per GPU (0: use --hicache-ratio).")
    ] = 0,
    hicache_ratio: Annotated[
        float | None, typer.Option(help="Host tier over the GPU's KV pool (default 2.0).")
    ] = None,
    hicache_write_policy: Annotated[
        WritePolicy, typer.Option(help="When the GPU's blocks are copied to the host.")
    ] = WritePolicy.WRITE_THROUGH,
    hicache_storage_backend: Annotated[
        str | None,
        typer.Option(help="Add a storage tier (in this process only: see emulator/hicache.py)."),
    ] = None,
    disaggregation_mode: Annotated[
        str, typer.Option(help="SGLang's P/D role: null, prefill or decode.")
    ] = "null",
    disaggregation_bootstrap_port: Annotated[
        int, typer.Option(help="A prefill's bootstrap server port.")
    ] = DEFAULT_BOOTSTRAP_PORT,
    disaggregation_transfer_backend: Annotated[
        str, typer.Option(help="The KV transfer engine: mooncake or nixl.")
    ] = DEFAULT_TRANSFER_BACKEND,
) -> None:
    """Run one emulated SGLang replica (sglang 0.5.23's HTTP interface) until interrupted."""
    try:
        replica = resolve_profile(profile)
        disaggregation = disagg_config(
            mode=disaggregation_mode,
            bootstrap_port=disaggregation_bootstrap_port,
            transfer_backend=disaggregation_transfer_backend,
        )
    except (ProfileError, ValueError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    if time_scale != 1.0:
        replica = replica.scaled(time_factor=time_scale)
    if max_queued_requests is not None:
        replica = replica.model_copy(update={"max_queued_requests": max_queued_requests})
    config = EmulatorConfig(
        profile=replica,
        served_model_name=model,
        api_key=api_key,
        host=host,
        port=port,
        enable_metrics=enable_metrics,
        warm=warm,
        schedule_policy=schedule_policy,
        cache_dir=cache_dir,
        seed=seed,
        grpc_port=grpc_port,
        lora_adapters=tuple(lora_adapter or ()),
        hicache=None
        if not enable_hierarchical_cache
        else HiCacheConfig(
            size_gb=hicache_size,
            ratio=hicache_ratio,
            write_policy=hicache_write_policy,
            storage_backend=hicache_storage_backend,
            storage_tokens=storage_tokens(os.environ),
            ranks=replica.gpu_count,
        ),
        disaggregation=disaggregation,
    )
    serve(config)


def serve(config: EmulatorConfig) -> None:
    """Serve `config` on its host and port until interrupted."""
    logging.basicConfig(level=logging.WARNING)
    emulator = Emulator(config)
    cold = emulator.model.ready_at - emulator.driver.now()
    print(
        f"emulated sglang replica {config.model_name!r} ({config.profile.name}) on "
        f"http://{config.host}:{config.port}"
        + (f" and grpc://{config.host}:{config.grpc_port}" if config.grpc_port is not None else "")
        + (
            ""
            if config.disaggregation is None
            else f" as {config.disaggregation.mode} (bootstrap port "
            f"{config.disaggregation.bootstrap_port})"
        )
        + f", healthy in {cold:.1f} s",
        flush=True,
    )
    web.run_app(
        emulator.app,
        host=config.host,
        port=config.port,
        backlog=LISTEN_BACKLOG,
        print=None,
        access_log=None,
        handle_signals=True,
        shutdown_timeout=5.0,
    )
