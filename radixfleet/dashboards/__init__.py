"""Grafana dashboards and Prometheus rules of the fleet, generated as code.

- `sli`: the recording rules of the shared SLIs, with their names as constants; controllers
  import this module (it pulls in no Grafana code) so they read the same series as the panels.
- `alerts`: the alerting rules; `rules`: both deployable forms of every rule.
- `fleet`, `model`, `tenant`, `regions`, `canary`: one module per dashboard, built with
  grafana-foundation-sdk; `panels`: the shared layer over the SDK.
- `render`: writes everything into `dashboards/`; `html`: a static HTML rendering of the panels
  from a live Prometheus, for reports.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from radixfleet.config.catalog import Catalog


def render_dashboards(out_dir: Path, *, catalog: Catalog) -> list[Path]:
    """Write the dashboards, the rules and their kustomization into `out_dir`."""
    # Imported here so that `radixfleet.dashboards.sli` stays importable without the SDK's cost.
    from radixfleet.dashboards.render import render_dashboards as render

    return render(out_dir, catalog=catalog)


def dashboard_files(catalog: Catalog) -> dict[str, str]:
    """The dashboards, the rules and their kustomization, by relative path, not written."""
    from radixfleet.dashboards.render import dashboard_files as files

    return files(catalog)
