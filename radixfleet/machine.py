"""Where a measurement ran: every benchmark states its machine beside its numbers."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any


def describe_machine() -> dict[str, Any]:
    """CPU model, cores, Python, platform, and the load other work put on the machine."""
    cpuinfo = Path("/proc/cpuinfo")
    names = []
    if cpuinfo.exists():
        names = [ln for ln in cpuinfo.read_text().splitlines() if ln.startswith("model name")]
    return {
        "cpu": names[0].split(":", 1)[1].strip() if names else "unknown",
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }
