"""What the cluster tests share besides the session's fixtures (tests/cluster/fixture.py)."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
