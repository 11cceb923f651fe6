"""The README's kubectl path, run as it is written, on a cluster as `make cluster` leaves one.

The two blocks under the README's marker (the deployment and its removal) are read from
README.md and run by bash with `set -euo pipefail`, so the README cannot drift from what works.
They run in a copy of the repository whose `inferenceservices/catalog.yaml` is this test's
(tests/data/readme/catalog.yaml: the README's names, sized for the test node), with what the
README asks a team to have first:

- the images by digest in `RADIXFLEET_IMAGE`, `SMG_IMAGE` and `SGLANG_IMAGE`: the test bed's,
  loaded into the node (no registry here); SGLang's is the emulated replica, which answers
  SGLang's command line (no GPU here);
- the model's weights: a claim on a node folder in the tenant's namespace (no object store).

One test bed shim beside them, installed by `make cluster`: the node has 2 cores and 24 GiB, so
an admission policy brings the predictor's CPU and memory requests down
(`testbed.emulated.fit_to_the_node`); the manifests are applied as rendered.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from radixfleet import labels
from radixfleet.render import entry as entry_base
from radixfleet.render import operator
from testbed import session
from testbed.__main__ import IMAGES_ENV
from testbed.cluster import Cluster, ClusterError
from testbed.emulated import model_volume
from tests.cluster.conftest import REPO

pytestmark = [pytest.mark.cluster, pytest.mark.own_cluster]

MARKER = "<!-- tests/cluster/test_readme.py runs the next two blocks as they are written"
CATALOG = REPO / "tests/data/readme/catalog.yaml"
NAMESPACE, MODEL = "team-search", "llama-3-1-8b"
BLOCK_TIMEOUT_S = 1200.0
# The PodMonitors scrape every 15 s; the operator and the kubelet pass a change on in seconds.
SCRAPE_TIMEOUT_S = 120.0
ENTRY_JOB = f"{operator.NAMESPACE}/{entry_base.NAME}"  # the PodMonitor's job
HARNESS = "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\nPS4='+ $(date +%T) '; set -x\n"
# What a checkout holds besides the repository's files: not copied into the fork.
NOT_THE_REPOSITORY = shutil.ignore_patterns(
    ".git", ".venv", "out", "__pycache__", ".*_cache", ".hypothesis", "overlay"
)


def readme_blocks(readme: str) -> tuple[str, str]:
    """The deployment block and the removal block that follow the README's marker."""
    after = readme[readme.index(MARKER) :]
    blocks = re.findall(r"^```bash\n(.*?)^```$", after, flags=re.MULTILINE | re.DOTALL)
    assert len(blocks) >= 2, "the README's kubectl path lost a block"
    return blocks[0], blocks[1]


def test_the_readme_blocks_are_found() -> None:
    deploy, remove = readme_blocks((REPO / "README.md").read_text())
    assert "kubectl apply --server-side -k inferenceservices/" in deploy
    assert deploy.rstrip().splitlines()[-1].startswith("kill %1")
    assert "kubectl delete -k inferenceservices/ --ignore-not-found" in remove.splitlines()


@pytest.fixture(scope="module")
def fork(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository as a team's fork of it holds it, with this test's catalog."""
    fork = tmp_path_factory.mktemp("readme") / "radixfleet"
    shutil.copytree(REPO, fork, ignore=NOT_THE_REPOSITORY, symlinks=True)
    shutil.copyfile(CATALOG, fork / "inferenceservices/catalog.yaml")
    return fork


def _environment(cluster: Cluster) -> dict[str, str]:
    """The shell a team runs the README in: its kubectl and kubeconfig, the images `make
    cluster` loaded into the node (the variables it wrote for a shell to source), and uv with
    this checkout's environment (radixfleet installed; nothing synced into the fork)."""
    written = (cluster.layout.run_dir / IMAGES_ENV).read_text()
    images = dict(line.removeprefix("export ").split("=", 1) for line in written.splitlines())
    return {
        **os.environ,
        **images,
        "PATH": f"{cluster.layout.bin}:{os.environ['PATH']}",
        "KUBECONFIG": str(cluster.kubeconfig),
        "UV_PROJECT_ENVIRONMENT": str(REPO / ".venv"),
        "UV_NO_SYNC": "1",
    }


def _chat_answer(output: str) -> dict[str, Any]:
    """curl's answer in the block's output (kubectl's lines and the port-forward's around it)."""
    (line,) = [line for line in output.splitlines() if '"chat.completion"' in line]
    answer, _ = json.JSONDecoder().raw_decode(line[line.index("{") :])
    assert isinstance(answer, dict), line
    return answer


def _trace(ran: subprocess.CompletedProcess[str]) -> str:
    """The commands a block ran, each with the time it started."""
    commands = (line for line in _told(ran).splitlines() if line.startswith("+ "))
    return "\n".join(line[:120] for line in commands)


def _told(ran: subprocess.CompletedProcess[str]) -> str:
    """What a block printed, the tenant's key (`openssl rand -hex 24`) left out."""
    return re.sub(r"\b[0-9a-f]{48}\b", "KEY", f"{ran.stdout}\n{ran.stderr}")


def _bash(block: str, *, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # Each command is traced to stderr with the time it started: a failure's message shows
    # which command failed and how long each before it took. A block that fails part way
    # leaves no port-forward behind (bash leaves background jobs running when it exits).
    argv = ["bash", "-euo", "pipefail", "-c", f"{HARNESS}{block}"]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=BLOCK_TIMEOUT_S, check=False)  # fmt: skip


@pytest.fixture(scope="module")
def prerequisites(cluster_for_people: Cluster) -> Iterator[Cluster]:
    """What the README asks for before its first command and `make cluster` does not give:
    the weights where the catalog's `pvc://` says (the namespace made first, to hold the
    claim). The volume is removed after the module."""
    cluster = cluster_for_people
    cluster.kubectl("create", "namespace", NAMESPACE)
    session.apply(cluster, model_volume(cluster, namespace=NAMESPACE, model=MODEL,
                                        data_plane_key=False))  # fmt: skip
    try:
        yield cluster
    finally:
        cluster.kubectl("delete", "pv", f"models-{NAMESPACE}", "--ignore-not-found", check=False)


def test_the_readmes_kubectl_path_serves_a_chat_and_removes_cleanly(
    prerequisites: Cluster, fork: Path
) -> None:
    cluster = prerequisites
    deploy, remove = readme_blocks((fork / "README.md").read_text())
    env = _environment(cluster)
    deployed = _bash(deploy, cwd=fork, env=env)
    wider = _wider_model_tried(cluster, fork) if deployed.returncode == 0 else ""
    scraped = _entry_scraped(cluster) if deployed.returncode == 0 else []
    removed = _bash(remove, cwd=fork, env=env)
    print(f"\n{_trace(deployed)}\n{_trace(removed)}")
    assert deployed.returncode == 0, _told(deployed)[-6000:]
    answer = _chat_answer(deployed.stdout)
    assert answer["object"] == "chat.completion" and answer["choices"][0]["message"]["content"]
    assert answer["usage"]["completion_tokens"] > 0, answer
    # The quota's GPU budget holds on a fleet made this way: its policy came with the operator.
    assert "inferenceservice-gpu-budget.radixfleet.io" in wider, wider
    assert "H100 budget exceeded" in wider, wider
    # `deploy/monitoring/`, applied as written, is served by the cluster's prometheus-operator.
    assert scraped, f"Prometheus never scraped {ENTRY_JOB}"
    assert removed.returncode == 0, _told(removed)[-6000:]
    left = cluster.kubectl(
        "get", "namespaces,clusterroles,crd,clusterservingruntimes,validatingadmissionpolicies,"
        "validatingadmissionpolicybindings", "-l", f"{labels.MANAGED_BY}={labels.MANAGER}",
        "-o", "name",
    )  # fmt: skip
    assert left.stdout.strip() == "", left.stdout


def _entry_scraped(cluster: Cluster) -> list[dict[str, Any]]:
    """The entry's `up` series once Prometheus has scraped it (empty if it never did)."""
    found: list[dict[str, Any]] = []

    def scraped() -> bool:
        found[:] = session.prometheus_query(cluster, f'up{{job="{ENTRY_JOB}"}} == 1')
        return bool(found)

    with contextlib.suppress(ClusterError):
        session.wait_for(scraped, timeout_s=SCRAPE_TIMEOUT_S, what=f"{ENTRY_JOB} scraped")
    return found


def _wider_model_tried(cluster: Cluster, fork: Path) -> str:
    """What the API server says to a second copy of the model with 3 replicas of 1 GPU, beside
    the served one (1 GPU), for a tenant of 2 (a server-side dry run: nothing is made)."""
    rendered = fork / "inferenceservices" / NAMESPACE / f"{MODEL}.yaml"
    isvc = yaml.safe_load(rendered.read_text())
    isvc["metadata"]["name"] = f"{MODEL}-wider"
    isvc["spec"]["predictor"]["maxReplicas"] = 3
    tried = cluster.kubectl("create", "--dry-run=server", "-f", "-", stdin=json.dumps(isvc),
                            check=False)  # fmt: skip
    return tried.stderr if tried.returncode else f"admitted: {tried.stdout}"
