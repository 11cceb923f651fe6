"""SGLang's own command line, served by the emulated replica: what ``python3 -m
sglang.launch_server`` runs in radixfleet's image.

A ClusterServingRuntime starts SGLang with ``python3 -m sglang.launch_server --model-path ...
--port 8080 --enable-metrics ...``. In the test cluster, where no GPU runs SGLang, radixfleet's
image answers that same command with the emulator, so the runtimes are deployed exactly as
rendered: every flag must be one sglang 0.5.23 accepts, with a valid value, or the replica exits
2 at start-up as SGLang would. The flags the emulator models (host, port, served model name,
API key, schedule policy, metrics, ``--max-total-tokens``: a cap on the KV pool) take effect;
the rest (parallelism, memory fractions) are accepted and have no effect on an emulated replica.

What SGLang learns from the GPU and the weights comes from the environment instead:
``RADIXFLEET_EMULATOR_PROFILE`` (a built-in profile, default ``h100-llama-3.1-8b``),
``RADIXFLEET_EMULATOR_TIME_SCALE`` (default 1.0) and ``RADIXFLEET_EMULATOR_WARM`` (``1``: no
cold start).

``--enable-hierarchical-cache`` gives the replica SGLang HiCache's host tier, sized and written
as ``--hicache-size``, ``--hicache-ratio`` and ``--hicache-write-policy`` say, and
``--hicache-storage-backend`` a storage tier of its own process
(:mod:`radixfleet.emulator.hicache`, which ``RADIXFLEET_EMULATOR_STORAGE_TOKENS`` sizes).

``--disaggregation-mode prefill|decode`` gives the replica SGLang's P/D role, with its
``--disaggregation-bootstrap-port`` (a prefill's bootstrap server, default 8998) and
``--disaggregation-transfer-backend`` (mooncake or nixl; SGLang's others are refused):
:mod:`radixfleet.emulator.disagg`.

``--smg-grpc-mode`` (or the deprecated ``--grpc-mode``) serves SGLang's gRPC protocol for the
gateway on ``--grpc-port`` (default ``--port`` + 10000, as SGLang's). SGLang then serves no HTTP
but a metrics sidecar; the emulator keeps its whole HTTP interface on ``--port``, so its
probes, metrics and fault hooks stay where they were.

``--nnodes N --node-rank R --dist-init-addr HOST:PORT`` makes the process one rank of a replica
spread over N pods (:mod:`radixfleet.emulator.multinode`): rank 0 serves once every rank has
joined it, the others serve only their health.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence

from radixfleet.emulator.bootstrap import DisaggConfig, disagg_config
from radixfleet.emulator.cli import serve
from radixfleet.emulator.config import EmulatorConfig
from radixfleet.emulator.hicache import hicache_from_flags
from radixfleet.emulator.multinode import Ranks, RendezvousError, ranks_from, run
from radixfleet.profile import ProfileError, resolve_profile
from radixfleet.replica import SchedulePolicy
from radixfleet.sglang_flags import check_args, first_value, parse_args

DEFAULT_PROFILE = "h100-llama-3.1-8b"


class LaunchError(Exception):
    """The command line or the environment cannot start a replica; exit 2, as SGLang does."""


def config_from(args: Sequence[str], environ: Mapping[str, str]) -> EmulatorConfig:
    """The emulator's configuration for an sglang command line and environment."""
    problems = list(check_args(args))
    if problems:
        raise LaunchError("; ".join(problems))
    flags = parse_args(args)
    try:
        profile = resolve_profile(environ.get("RADIXFLEET_EMULATOR_PROFILE", DEFAULT_PROFILE))
        scale = float(environ.get("RADIXFLEET_EMULATOR_TIME_SCALE", "1.0"))
        hicache = hicache_from_flags(flags, environ)
        disaggregation = _disaggregation(flags)
    except (ProfileError, ValueError) as error:
        raise LaunchError(str(error)) from error
    if scale != 1.0:
        profile = profile.scaled(time_factor=scale)
    max_total = first_value(flags, "max_total_tokens")
    if max_total is not None:
        # SGLang's cap on its KV pool: the pool is the smaller of it and what memory holds.
        tokens = min(profile.kv_capacity_tokens, int(max_total))
        profile = profile.model_copy(update={"kv_capacity_tokens": tokens})
    port = int(first_value(flags, "port") or 30000)
    return EmulatorConfig(
        profile=profile,
        served_model_name=first_value(flags, "served_model_name"),
        api_key=first_value(flags, "api_key"),
        host=first_value(flags, "host") or "127.0.0.1",
        port=port,
        enable_metrics="enable_metrics" in flags,
        warm=environ.get("RADIXFLEET_EMULATOR_WARM", "") == "1",
        schedule_policy=SchedulePolicy(first_value(flags, "schedule_policy") or "fcfs"),
        cache_dir=None,
        grpc_port=_grpc_port(flags, port=port),
        lora_adapters=tuple(lora_name(spec) for spec in flags.get("lora_paths", [])),
        hicache=hicache,
        disaggregation=disaggregation,
    )


def _disaggregation(flags: Mapping[str, list[str]]) -> DisaggConfig | None:
    port = first_value(flags, "disaggregation_bootstrap_port")
    return disagg_config(
        mode=first_value(flags, "disaggregation_mode"),
        bootstrap_port=None if port is None else int(port),
        transfer_backend=first_value(flags, "disaggregation_transfer_backend"),
    )


def lora_name(spec: str) -> str:
    """The adapter name of one `--lora-paths` entry: `NAME=PATH`, a JSON object with
    `lora_name`, or a bare path (named by the path, as SGLang names it)."""
    if spec.lstrip().startswith("{"):
        try:
            name = json.loads(spec).get("lora_name")
        except (json.JSONDecodeError, AttributeError):
            name = None
        if not isinstance(name, str) or not name:
            raise LaunchError(f"--lora-paths: {spec!r} is not a JSON object with a lora_name")
        return name
    name, equals, _path = spec.partition("=")
    return name if equals else spec


def _grpc_port(flags: Mapping[str, list[str]], *, port: int) -> int | None:
    if "smg_grpc_mode" not in flags and "grpc_mode" not in flags:
        return None
    return int(first_value(flags, "grpc_port") or port + 10000)


def ranks_of(args: Sequence[str]) -> Ranks | None:
    """This process's rank in a multi-node replica; None on one node."""
    try:
        return ranks_from(parse_args(args))
    except (RendezvousError, ValueError) as error:
        raise LaunchError(str(error)) from error


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    try:
        config = config_from(args, os.environ)
        ranks = ranks_of(args)
    except LaunchError as error:
        print(f"launch_server: error: {error}", file=sys.stderr)
        return 2
    if ranks is None:
        serve(config)
        return 0
    return run(ranks, lambda: serve(config), host=config.host, port=config.port)
