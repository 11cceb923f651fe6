"""The type every manifest here has."""

from __future__ import annotations

from typing import Any

Manifest = dict[str, Any]
