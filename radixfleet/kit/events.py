"""The Events port: what a controller reports about an object, as `kubectl describe` shows it.

`radixfleet.kit.kube.KubeEvents` implements it on core/v1 Events; tests use recording fakes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class Events(Protocol):
    def emit(
        self, *, involved: Mapping[str, Any], reason: str, message: str, warning: bool
    ) -> None: ...
