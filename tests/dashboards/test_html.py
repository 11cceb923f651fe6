"""The static HTML rendering of the dashboards, from the live Prometheus, in headless Chromium."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image

from radixfleet.dashboards import sli
from radixfleet.dashboards.html import format_value, legend_text, write_dashboard_report
from radixfleet.dashboards.render import all_dashboards
from tests.dashboards.conftest import LivePrometheus, wait_for_series

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


def chromium(args: list[str], *, profile: Path) -> str:
    binary = shutil.which("chromium")
    if binary is None:
        pytest.skip("chromium is not installed (scripts/provision.sh installs it)")
    done = subprocess.run(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout


@pytest.mark.prometheus
def test_static_page_shows_every_panel_with_data(
    live_prometheus: LivePrometheus, tmp_path: Path
) -> None:
    wait_for_series(live_prometheus.url, [sli.slo_ttft_bad_ratio("5m")], timeout_s=20)
    time.sleep(2)  # a few more points per line
    boards = list(all_dashboards().values())
    html_path = write_dashboard_report(
        tmp_path, live_prometheus.url, live_prometheus.started, time.time()
    )

    dom = chromium(["--dump-dom", html_path.as_uri()], profile=tmp_path / "profile-dom")
    shot = tmp_path / "dashboards.png"
    chromium(
        ["--window-size=1280,7000", f"--screenshot={shot}", html_path.as_uri()],
        profile=tmp_path / "profile-shot",
    )
    print(f"\nstatic dashboards: {html_path}\nscreenshot: {shot}")

    panels = [p for b in boards for p in b["panels"] if p["type"] != "row"]
    for panel in panels:
        assert f">{panel['title']}</div>" in dom, panel["title"]
    assert dom.count('class="panel"') == len(panels)  # no panel-error, every panel drawn
    assert 'data-series="0"' not in dom
    assert dom.count("data:image/png;base64,") == sum(p["type"] == "timeseries" for p in panels)
    pixels = image.imread(shot)
    assert pixels.shape[0] >= 7000 and pixels.shape[1] >= 1280
    assert float(np.std(pixels[..., :3])) > 0.05, "the screenshot is blank"


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (0.423, "percentunit", "42.3%"),
        (20, "percent", "20%"),
        (0.012, "s", "12 ms"),
        (2.5, "s", "2.5 s"),
        (74_448_896_000, "bytes", "69.3 GiB"),
        (1530, "short", "1.53k"),
        (3.2, "reqps", "3.2 req/s"),
        (float("nan"), "short", "NaN"),
    ],
)
def test_values_read_like_grafana(value: float, unit: str, text: str) -> None:
    assert format_value(value, unit) == text


def test_legends_fill_labels_like_grafana() -> None:
    labels = {"__name__": "x", "region": "us-east-1", "direction": "out"}
    assert legend_text("{{region}} {{ direction }}", labels) == "us-east-1 out"
    assert legend_text("__auto", labels) == 'x{direction="out", region="us-east-1"}'
