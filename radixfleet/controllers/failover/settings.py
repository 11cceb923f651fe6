"""The failover's own settings: the clusters of the regions it judges, and where their floors are.

On `radixfleet operator run` they are `--failover-context REGION=CONTEXT` (repeatable) and
`--failover-namespace`; on `radixfleet failover run`, which runs nothing else, `--context` and
`--floors-namespace`. Pure data and a parser: the plug-in lists them, loading no client.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from radixfleet.kit.settings import Setting


def parse_contexts(pairs: Sequence[str]) -> dict[str, str]:
    """`REGION=CONTEXT` options as a mapping (region -> kubeconfig context of its cluster)."""
    found: dict[str, str] = {}
    for pair in pairs:
        region, sep, context = pair.partition("=")
        if not sep or not region or not context:
            raise ValueError(f"{pair!r} is not REGION=CONTEXT")
        found[region] = context
    return found


CONTEXTS = Setting(
    "contexts", ("--failover-context",),
    "REGION=KUBECONFIG-CONTEXT of each region's cluster, for the failover.",
    repeatable=True, parse=parse_contexts,
)  # fmt: skip
FLOORS_NAMESPACE = Setting(
    "floors_namespace", ("--failover-namespace",),
    "Namespace of the failover's floors ConfigMap in each region.", default="default",
)  # fmt: skip
SETTINGS = (CONTEXTS, FLOORS_NAMESPACE)

# The same settings on `radixfleet failover run`, where no other controller's options stand.
ALONE = (
    replace(CONTEXTS, flags=("--context",),
            help="REGION=KUBECONFIG-CONTEXT of a region's cluster."),
    replace(FLOORS_NAMESPACE, flags=("--floors-namespace",),
            help="Namespace of the floors ConfigMap in each region."),
)  # fmt: skip
