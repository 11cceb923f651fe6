"""Scaling baselines: a fixed replica count, and Knative's KPA with its documented defaults.

:class:`Kpa` is Knative Serving's concurrency autoscaler (`pkg/autoscaler/scaling`) with the
defaults of `config-autoscaler` (CALIBRATION.md): target 100 concurrent requests per pod at 70%
utilization, a 60 s stable window, a 6 s panic window (10%) entered at 200% of target, scale-up
at most 1000x and scale-down at most 2x per 2 s tick, panic never scaling down, and scale to zero
once the stable window has seen no request for the 30 s grace period.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from radixfleet.twin.interfaces import ServiceObservation


class Fixed:
    """Always the same replica count (a statically provisioned service)."""

    needs_replica_stats = False

    def __init__(self, replicas: int, *, tick_s: float = 10.0) -> None:
        self.replicas = replicas
        self.tick_s = tick_s

    def desired_replicas(self, observed: ServiceObservation, now: float) -> int:
        """The configured count."""
        return self.replicas


@dataclass(frozen=True)
class KpaSettings:
    """Knative's `config-autoscaler` defaults."""

    container_concurrency_target: float = 100.0
    target_utilization: float = 0.70
    stable_window_s: float = 60.0
    panic_window_percentage: float = 10.0
    panic_threshold: float = 2.0
    max_scale_up_rate: float = 1000.0
    max_scale_down_rate: float = 2.0
    scale_to_zero_grace_s: float = 30.0
    tick_s: float = 2.0

    @property
    def target(self) -> float:
        """Concurrency per pod the KPA aims at."""
        return self.container_concurrency_target * self.target_utilization

    @property
    def panic_window_s(self) -> float:
        """The panic window: a percentage of the stable window."""
        return self.stable_window_s * self.panic_window_percentage / 100.0


class Kpa:
    """The Knative Pod Autoscaler's decision, fed one mean-concurrency sample per tick."""

    needs_replica_stats = False

    def __init__(self, settings: KpaSettings | None = None) -> None:
        self.settings = settings or KpaSettings()
        self.tick_s = self.settings.tick_s
        self._samples: deque[tuple[float, float]] = deque()
        self._panic_since: float | None = None
        self._max_panic_pods = 0
        self._zero_since: float | None = None
        self._first: float | None = None

    def desired_replicas(self, observed: ServiceObservation, now: float) -> int:
        """Knative's `Scale()` on the windowed concurrency, then the scale-to-zero grace."""
        settings = self.settings
        self._record(observed, now)
        if self._first is None:
            self._first = now
        if now - self._first < settings.stable_window_s and not observed.buffered:
            # Knative's collector answers "no data" until a stable window is filled: no change.
            return observed.active
        ready = max(1.0, float(observed.ready))
        stable = self._average(now, settings.stable_window_s)
        panic = self._average(now, settings.panic_window_s)
        low = math.floor(ready / settings.max_scale_down_rate)
        high = math.ceil(settings.max_scale_up_rate * ready)
        want_stable = _clamp(math.ceil(stable / settings.target), low, high)
        want_panic = _clamp(math.ceil(panic / settings.target), low, high)
        desired = self._panic(want_stable, want_panic, ready=ready, now=now)
        return self._grace(desired, observed, now)

    def _record(self, observed: ServiceObservation, now: float) -> None:
        # Buffered requests count: the activator reports them while no pod is ready.
        value = observed.mean_concurrency + observed.buffered
        self._samples.append((now, value))
        horizon = now - self.settings.stable_window_s
        while self._samples and self._samples[0][0] <= horizon:
            self._samples.popleft()

    def _average(self, now: float, window: float) -> float:
        values = [value for at, value in self._samples if at > now - window]
        return sum(values) / len(values) if values else 0.0

    def _panic(self, want_stable: int, want_panic: int, *, ready: float, now: float) -> int:
        over = want_panic / ready >= self.settings.panic_threshold
        if over:
            self._panic_since = now
        elif (
            self._panic_since is not None
            and now > self._panic_since + self.settings.stable_window_s
        ):
            self._panic_since, self._max_panic_pods = None, 0
        if self._panic_since is None:
            return want_stable
        # In panic the KPA scales on the panic window and never scales down.
        self._max_panic_pods = max(self._max_panic_pods, want_panic)
        return self._max_panic_pods

    def _grace(self, desired: int, observed: ServiceObservation, now: float) -> int:
        if desired > 0:
            self._zero_since = None
            return desired
        if self._zero_since is None:
            self._zero_since = now
        if now - self._zero_since >= self.settings.scale_to_zero_grace_s:
            return 0
        return 1 if observed.active else 0  # the last pod stays through the grace period


def _clamp(value: int, low: float, high: float) -> int:
    return int(min(max(value, low), high))
