"""The fleet's Prometheus: its config over the fleet's scrape targets, a server for the fleet
and one per region (relayed through the region's entry, as a deployed region's is); and what
the routers decided and the replicas cached, read from them directly for reports."""

from __future__ import annotations

import collections
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from radixfleet.dataplane.signals import PREFIX as SIGNALS_PREFIX
from radixfleet.localfleet.core import LocalFleetCore
from radixfleet.localfleet.pairs import kv_transfers
from radixfleet.localfleet.prometheus import (
    scrape_config,
    start_prometheus,
    wait_scraped,
)
from radixfleet.localfleet.replica import scraped
from radixfleet.localfleet.scaler import ReplicaState


class LocalFleetMonitoring(LocalFleetCore):
    """The fleet's Prometheus servers and their config, and its routers' and replicas' own
    counters."""

    def stop_prometheus(self) -> None:
        """Stop the fleet's Prometheus (its data stays); `start_prometheus_again` brings it back."""
        assert self.prometheus is not None, "no Prometheus was started"
        self.prometheus.stop(self.supervisor)

    def start_prometheus_again(self) -> None:
        """Start the fleet's Prometheus again, on its address and storage."""
        assert self.prometheus is not None, "no Prometheus was started"
        self.prometheus.start_again(self.supervisor)

    def write_prometheus_config(
        self, *, rule_files: list[Path] | None = None, region: str | None = None
    ) -> Path:
        """Write prometheus.yml scraping this fleet (every second), or only `region` of it, and
        return its path."""
        config = scrape_config(
            replica_targets=self.replica_targets_file,
            router_targets=self.router_targets_file,
            rule_files=rule_files,
            region=region,
        )
        path = self.workdir / "scrape" / f"prometheus{'-' + region if region else ''}.yml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        return path

    def start_prometheus(self, *, rule_files: list[Path] | None = None) -> str | None:
        """Start Debian's Prometheus scraping the fleet; its URL, or None if not installed."""
        config = self.write_prometheus_config(rule_files=rule_files)
        data = self.workdir / "prometheus" / "data"
        self.prometheus = start_prometheus(
            supervisor=self.supervisor, config=config, data_dir=data, host=self.host
        )
        return None if self.prometheus is None else self.prometheus.url

    def start_region_prometheus(self, region: str) -> str | None:
        """Start a Prometheus of `region`'s own targets and relay it through that region's
        entry (`signals_url`), as each region of a deployed fleet has its own; its URL, or
        None when Prometheus is not installed."""
        runtime = self.regions[region]
        config = self.write_prometheus_config(region=region)
        data = self.workdir / f"prometheus-{region}" / "data"
        server = start_prometheus(
            supervisor=self.supervisor, config=config, data_dir=data, host=self.host
        )
        if server is None:
            return None
        own_routers = [r for name, _, r in self._routers_by_model() if name == region]
        ready = [i for rs in runtime.sets.values() for i in rs.replicas()
                 if i.state is ReplicaState.READY]  # fmt: skip
        wait_scraped(server, targets=len(own_routers) + len(ready))
        self.region_prometheus[region] = server
        if runtime.entry is not None and runtime.entry.signals is not None:
            runtime.entry.signals.prometheus_url = server.url
        return server.url

    def signals_url(self, region: str) -> str:
        """Where the failover reads `region`'s Prometheus: its entry, with `fleet_token`."""
        return self.entry_url(region) + SIGNALS_PREFIX

    def kv_transfers(self) -> dict[str, dict[str, float]]:
        """Per `region/model` served as a prefill/decode pair, the KV its live prefill replicas
        sent to their decode peers: `mb`, `transfers` and `latency_ms`, summed."""
        assert self._session is not None
        session = self._session

        async def read() -> dict[str, dict[str, float]]:
            out: dict[str, dict[str, float]] = {}
            for region in self.regions.values():
                for name, pair in region.pairs.items():
                    totals: collections.Counter[str] = collections.Counter()
                    for replica in pair.prefill.replicas():
                        if replica.state is ReplicaState.READY:
                            totals.update(await scraped(session, replica.url, kv_transfers))
                    out[f"{region.spec.name}/{name}"] = dict(totals)
            return out

        return self.run(read(), timeout_s=30)

    # -- what the routers decided and the replicas cached ----------------------------------

    def routing_decisions(self) -> dict[str, dict[str, float]]:
        """Per `region/model`, the stable router's cache-aware decisions so far, by branch."""
        assert self._session is not None
        session = self._session

        async def read() -> dict[str, dict[str, float]]:
            return {
                f"{region.spec.name}/{model}": await router.decisions(session)
                for region in self.regions.values()
                for model, router in region.routers.items()
            }

        return self.run(read(), timeout_s=30)

    def cache_sources(self) -> dict[str, dict[str, float]]:
        """Per `region/model`, what its live replicas' /metrics say: prompt tokens and cached
        tokens by source (`device`, and with HiCache `host` and `storage`), summed."""
        assert self._session is not None
        session = self._session

        async def read() -> dict[str, dict[str, float]]:
            out: dict[str, dict[str, float]] = {}
            for region in self.regions.values():
                for name, replica_set in region.sets.items():
                    totals: collections.Counter[str] = collections.Counter()
                    for replica in replica_set.replicas():
                        if replica.state is ReplicaState.READY:
                            totals.update(await scraped(session, replica.url, cache_sources))
                    out[f"{region.spec.name}/{name}"] = dict(totals)
            return out

        return self.run(read(), timeout_s=30)

    def router_decisions(self, region: str, model: str) -> list[dict[str, float]]:
        """The stable revision's cache-aware decisions so far, one dict per router replica."""
        assert self._session is not None
        session, group = self._session, self.regions[region].routers[model]

        async def read() -> list[dict[str, float]]:
            return [await member.decisions(session) for member in group.members]

        return self.run(read(), timeout_s=30)


def cache_sources(metrics_text: str) -> dict[str, float]:
    """`prompt_tokens` and each `cache_source` of `sglang:cached_tokens_total` in an SGLang
    replica's Prometheus exposition."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == "sglang:prompt_tokens_total":
                out["prompt_tokens"] = out.get("prompt_tokens", 0.0) + sample.value
            elif sample.name == "sglang:cached_tokens_total":
                source = sample.labels.get("cache_source", "device")
                out[source] = out.get(source, 0.0) + sample.value
    return out
