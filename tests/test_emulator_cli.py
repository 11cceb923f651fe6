"""`radixfleet emulate` as a user runs it: a process that serves until terminated."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

CLI = [sys.executable, "-c", "from radixfleet.cli import app; app()", "emulate"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.fleet
def test_emulate_serves_a_profile_from_yaml_until_terminated(tmp_path: Path) -> None:
    profile = tmp_path / "small.yaml"
    profile.write_text("base: h200-llama-3.1-8b\nname: small-h200\ncontainer_start_s: 0.2\n"
                       "weights_load_s: 0\ngraph_capture_s: 0\n")  # fmt: skip
    port = free_port()
    command = [*CLI, "--port", str(port), "--profile", str(profile), "--model", "tiny"]
    command += ["--cache-dir", str(tmp_path / "cache")]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        info = None
        deadline = time.monotonic() + 120
        while info is None:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"emulator never served: {process.communicate()[0].decode()}")
            try:
                url = f"http://127.0.0.1:{port}"
                with urllib.request.urlopen(f"{url}/health", timeout=2) as health:
                    assert health.status == 200
                with urllib.request.urlopen(f"{url}/server_info", timeout=2) as answer:
                    info = json.loads(answer.read())
            except OSError:
                time.sleep(0.1)
        assert (info["profile"], info["served_model_name"]) == ("small-h200", "tiny")
        assert info["max_total_tokens"] == 920_000
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output.decode()
    assert b"small-h200" in output


def test_emulate_refuses_a_bad_profile_with_file_and_field(tmp_path: Path) -> None:
    profile = tmp_path / "bad.yaml"
    profile.write_text("kv_capacity_tokens: lots\n")
    done = subprocess.run(
        [*CLI, "--profile", str(profile)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert str(profile) in done.stderr and "kv_capacity_tokens" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.fleet
def test_emulate_serves_lora_adapters_it_preloads_and_loads(tmp_path: Path) -> None:
    port = free_port()
    command = [*CLI, "--port", str(port), "--warm", "--time-scale", "0.01"]
    command += ["--cache-dir", str(tmp_path / "cache"), "--lora-adapter", "billing=/a/billing"]
    command += ["--max-loras-per-batch", "2", "--max-loaded-loras", "2"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"emulator never served: {process.communicate()[0].decode()}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as health:
                    if health.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        body = json.dumps({"lora_name": "support", "lora_path": "/a/support"}).encode()
        with urllib.request.urlopen(f"{url}/load_lora_adapter", data=body, timeout=30) as answer:
            assert json.loads(answer.read())["success"] is True
        with urllib.request.urlopen(f"{url}/v1/models", timeout=30) as answer:
            models = json.loads(answer.read())["data"]
        assert [(m["id"], m["root"]) for m in models[1:]] == [
            ("billing", "/a/billing"),
            ("support", "/a/support"),
        ]
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output.decode()


def test_emulate_refuses_lora_bounds_sglang_refuses() -> None:
    command = [*CLI, "--enable-lora", "--max-loras-per-batch", "4", "--max-loaded-loras", "2"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "max_loaded_loras should be greater than or equal to max_loras_per_batch" in done.stderr
    assert "Traceback" not in done.stderr
