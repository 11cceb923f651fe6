"""The Pulumi program run for real by the Pulumi CLI, through the Automation API.

The CLI (v3.274.1) and pulumi-kubernetes' provider plugin are built here from the Go module proxy
(`testbed.builds.PULUMI`, `PULUMI_KUBERNETES`): no prebuilt Pulumi can be downloaded. The program
is an *inline* program: `infra.program.main` runs inside this Python process, which serves the
language runtime to the CLI, so Pulumi's Python language host (not served by the proxy) is not
needed. State lives in a local file backend under the run's folder, encrypted with a passphrase
of the test bed; nothing is fetched (no plugin download, no update check).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pulumi import automation as auto

from infra.program import main
from infra.settings import NAMESPACE
from testbed.builds import PULUMI, PULUMI_KUBERNETES
from testbed.gobuild import ensure_built

PROJECT = "radixfleet"
PASSPHRASE = "radixfleet-test-bed"  # the local state's key: a test bed's, guarding no secret
SECRET_KEYS = frozenset({f"{NAMESPACE}:fleetToken", f"{NAMESPACE}:tenantKeys"})


def tools(folder: Path) -> Path:
    """`folder` holding `bin/pulumi` (where the Automation API looks) and the provider plugin
    beside it (where the CLI looks on PATH), built first when missing."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for build, name in ((PULUMI, "pulumi"), (PULUMI_KUBERNETES, "pulumi-resource-kubernetes")):
        link = bin_dir / name
        link.unlink(missing_ok=True)
        link.symlink_to(ensure_built(build) / name)
    return folder


def environment(work: Path, tools_dir: Path) -> dict[str, str]:
    """The CLI's environment: a file backend under `work`, our plugin, no network."""
    return {
        "PULUMI_BACKEND_URL": f"file://{work / 'state'}",
        "PULUMI_HOME": str(work / "home"),
        "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "PATH": f"{tools_dir / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def stack(
    work: Path,
    name: str,
    config: Mapping[str, Any],
    *,
    program: Callable[[], None] = main,
) -> auto.Stack:
    """The stack `name` of the Pulumi program with `config` (a stack's `config:` block: objects
    are passed as JSON, as Pulumi hands them to the program), its state under `work`."""
    for folder in (work / "state", work / "home", work / "project"):
        folder.mkdir(parents=True, exist_ok=True)
    tools_dir = tools(work / "pulumi")
    options = auto.LocalWorkspaceOptions(
        # Not infra/: the CLI would write the stack's settings file beside the project.
        work_dir=str(work / "project"),
        env_vars=environment(work, tools_dir),
        pulumi_command=auto.PulumiCommand(root=str(tools_dir)),
        project_settings=auto.ProjectSettings(name=PROJECT, runtime="python"),
    )
    found = auto.create_or_select_stack(
        stack_name=name, project_name=PROJECT, program=program, opts=options
    )
    found.set_all_config({
        key: auto.ConfigValue(
            value=value if isinstance(value, str) else json.dumps(value),
            secret=key in SECRET_KEYS,
        )
        for key, value in config.items()
    })  # fmt: skip
    return found


def changes(summary: auto.UpdateSummary) -> dict[str, int]:
    """What an update did, by operation, the unchanged (`same`) left out."""
    done = summary.resource_changes or {}
    return {operation: count for operation, count in done.items() if operation != "same" and count}
