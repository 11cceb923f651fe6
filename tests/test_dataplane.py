"""The data plane's key on SGLang's and smg's command lines survives any key.

smg's launcher is the real one (`python -m smg launch`, argparse, as SGLang's `launch_server`).
A key that begins with a dash, given as a second argument after `--api-key`, reads to argparse as
another flag and the process exits 2 at start: one test cluster's router crash-looped so.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from radixfleet import dataplane
from radixfleet.render.runtimes import VARIANTS, build_runtime

DASHED_KEY = "-Zq3xYw"  # one random url-safe key in 64 began like this


def _smg_parses(args: list[str]) -> subprocess.CompletedProcess[str]:
    # `--help` after the key: argparse consumes the key first, then prints help and exits 0.
    command = [sys.executable, "-m", "smg", "launch", *args, "--help"]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def _expanded(args: list[str], key: str) -> list[str]:
    """The arguments as the kubelet passes them, `$(ENV)` replaced by the Secret's value."""
    return [a.replace(f"$({dataplane.ENV})", key) for a in args]


@pytest.mark.parametrize("key", [DASHED_KEY, "plainkey"], ids=["dash-first", "plain"])
def test_smg_takes_the_rendered_api_key_whatever_its_first_character(key: str) -> None:
    answer = _smg_parses(_expanded(dataplane.api_key_args(), key))
    assert answer.returncode == 0, answer.stderr[-500:]


def test_a_dashed_key_as_a_second_argument_is_what_smg_refuses() -> None:
    """The form the routers and runtimes used before: the failure the fix is for."""
    answer = _smg_parses(["--api-key", DASHED_KEY])
    assert answer.returncode == 2
    assert "--api-key: expected one argument" in answer.stderr


def test_new_keys_never_begin_with_a_dash() -> None:
    keys = [dataplane.secret("ns")["stringData"][dataplane.KEY] for _ in range(500)]
    assert all(k[0].isalnum() and len(k) == 64 for k in keys)


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param([dataplane.env_var("api-key-2")], "api-key-2", id="the-key-named"),
        pytest.param(
            [{"name": "HOME", "value": "/x"}, dataplane.env_var()], "api-key", id="among-others"
        ),
        pytest.param([{"name": dataplane.ENV, "value": "inline"}], None, id="not-from-the-secret"),
        pytest.param(
            [{"name": dataplane.ENV, "valueFrom": {"secretKeyRef": {"name": "other", "key": "k"}}}],
            None,
            id="another-secret",
        ),
        pytest.param([], None, id="none"),
    ],
)
def test_a_revisions_key_is_the_one_its_container_reads_from_the_data_planes_secret(
    env: list[dict[str, object]], expected: str | None
) -> None:
    spec = {"containers": [{"name": "queue-proxy"}, {"name": "kserve-container", "env": env}]}
    assert dataplane.key_name(spec) == expected


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_every_runtime_reads_the_key_its_inference_service_names(name: str) -> None:
    runtime, _ = build_runtime(name)
    assert dataplane.key_name(runtime["spec"]) == dataplane.KEY_PLACEHOLDER
    # A multi-node worker holds no key: it serves only its health, and KServe would not fill
    # the placeholder in a worker's container anyway.
    worker = runtime["spec"].get("workerSpec")
    assert worker is None or dataplane.key_name(worker) is None
