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
