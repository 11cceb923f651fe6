"""`python3 -m sglang.launch_server` in radixfleet's image: SGLang's command line, served by the
emulator. The rendered runtimes' own argument lists must start a replica, and a flag SGLang
refuses must stop it with exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from radixfleet.emulator.launch_server import LaunchError, config_from, main
from radixfleet.replica import SchedulePolicy

REPO = Path(__file__).resolve().parents[1]
RUNTIMES = sorted((REPO / "runtimes").glob("sglang*.yaml"))


def _runtime_args(path: Path) -> list[str]:
    runtime = yaml.safe_load(path.read_text())
    container = runtime["spec"]["containers"][0]
    assert container["command"][-2:] == ["-m", "sglang.launch_server"], path.name
    # KServe fills {{.Name}} at deploy time; any name does here.
    return [arg.replace("{{.Name}}", "llama") for arg in container["args"]]


@pytest.mark.parametrize("runtime", RUNTIMES, ids=[p.stem for p in RUNTIMES])
def test_every_rendered_runtime_command_line_starts_an_emulated_replica(runtime: Path) -> None:
    config = config_from(_runtime_args(runtime), {})
    assert config.port == 8080
    assert config.host == "0.0.0.0"
    assert config.served_model_name == "llama"
    assert config.enable_metrics


def test_the_flags_the_emulator_models_take_effect() -> None:
    args = [
        "--model-path",
        "/m",
        "--host",
        "0.0.0.0",
        "--port=9000",
        "--api-key",
        "k",
        "--schedule-policy",
        "lpm",
    ]
    config = config_from(args, {"RADIXFLEET_EMULATOR_WARM": "1"})
    assert (config.port, config.api_key, config.warm) == (9000, "k", True)
    assert config.schedule_policy is SchedulePolicy.LPM
    assert not config.enable_metrics


@pytest.mark.parametrize(
    ("extra", "grpc_port"),
    [
        ([], None),
        (["--smg-grpc-mode"], 18080),
        (["--grpc-mode"], 18080),
        (["--smg-grpc-mode", "--grpc-port", "9000"], 9000),
        (["--grpc-port", "9000"], None),  # SGLang's native gRPC, not the gateway's protocol
    ],
    ids=["http-only", "smg-grpc-mode", "deprecated-grpc-mode", "explicit-port", "native-grpc"],
)
def test_smg_grpc_mode_serves_the_gateways_protocol_on_sglangs_port(
    extra: list[str], grpc_port: int | None
) -> None:
    config = config_from(["--model-path", "m", "--port", "8080", *extra], {})
    assert config.grpc_port == grpc_port
    assert config.port == 8080


@pytest.mark.parametrize(
    ("args", "environ", "message"),
    [
        (["--no-such-flag"], {}, "unknown sglang flag --no-such-flag"),
        (["--schedule-policy", "random-ish"], {}, "--schedule-policy 'random-ish'"),
        (["--port", "eighty"], {}, "not a valid int"),
        ([], {"RADIXFLEET_EMULATOR_PROFILE": "no-such-profile"}, "no-such-profile"),
        ([], {"RADIXFLEET_EMULATOR_TIME_SCALE": "fast"}, "fast"),
        # SGLang's argparse reads a value that begins with a dash as the next flag.
        (["--api-key", "-Zq3x"], {}, "--api-key needs a value"),
    ],
    ids=[
        "unknown-flag",
        "bad-choice",
        "bad-int",
        "unknown-profile",
        "bad-time-scale",
        "dashed-value-apart",
    ],
)
def test_what_sglang_refuses_stops_the_replica(
    args: list[str], environ: dict[str, str], message: str
) -> None:
    with pytest.raises(LaunchError, match=message):
        config_from(args, environ)


def test_main_exits_2_with_one_line_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--no-such-flag"]) == 2
    assert capsys.readouterr().err == "launch_server: error: unknown sglang flag --no-such-flag\n"


@pytest.mark.parametrize(
    ("cap", "expected"),
    [
        pytest.param("4096", 4096, id="below-the-profiles-pool"),
        pytest.param("1000000", 420_000, id="above-it-changes-nothing"),
    ],
)
def test_max_total_tokens_caps_the_kv_pool_as_sglangs_does(cap: str, expected: int) -> None:
    config = config_from(["--model-path", "m", "--max-total-tokens", cap], {})
    assert config.profile.kv_capacity_tokens == expected
