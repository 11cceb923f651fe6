"""Route 53: for every model and every region it runs in, a health-checked weighted record.

`<model>.<domain>` has one weighted record per region, each pointing at the region's own name
`<model>.<region>.<domain>` (the region's load balancer) and guarded by a health check of that
name. The failover controller shifts the weights later; Pulumi sets them once and leaves them.
Each region also gets `fleet.<region>.<domain>` on its load balancer: where the failover reads
that region's serving signals from its entry (radixfleet/dataplane/signals.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from infra.manifests import signals_name
from infra.settings import DnsSettings

# The failover controller decides within seconds; a resolver keeps the old weights for a TTL
# more, so a short TTL is what makes its decisions count (the twin's 30 s recovery assumes 10 s).
TTL_S = 10
DEFAULT_WEIGHT = 100
# Route 53 marks an endpoint unhealthy after this many failed probes at this interval.
HEALTH_INTERVAL_S = 30
HEALTH_FAILURES = 3


def global_name(model: str, domain: str) -> str:
    return f"{model}.{domain}"


def regional_name(model: str, region: str, domain: str) -> str:
    return f"{model}.{region}.{domain}"


@dataclass(frozen=True)
class ModelDnsArgs:
    settings: DnsSettings
    # model -> the deployed regions it runs in
    endpoints: Mapping[str, Sequence[str]]
    # region -> the public name of its ingress load balancer
    ingress_hostnames: Mapping[str, pulumi.Input[str]]


class ModelDns(pulumi.ComponentResource):
    """Regional names, health checks and weighted records of every model endpoint."""

    names: dict[str, str]

    def __init__(self, name: str, args: ModelDnsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("radixfleet:aws:ModelDns", name, None, opts)
        self._name, self._args = name, args
        domain = args.settings.domain
        for model, regions in args.endpoints.items():
            for region in regions:
                self._endpoint(model, region)
        for region, hostname in args.ingress_hostnames.items():
            aws.route53.Record(
                f"{self._name}-signals-{region}", zone_id=args.settings.zone_id,
                name=signals_name(region, domain), type="CNAME", ttl=TTL_S, records=[hostname],
                opts=pulumi.ResourceOptions(parent=self),
            )  # fmt: skip
        self.names = {model: global_name(model, domain) for model in args.endpoints}
        self.register_outputs({"names": self.names})

    def _endpoint(self, model: str, region: str) -> None:
        settings, child = self._args.settings, pulumi.ResourceOptions(parent=self)
        name = f"{self._name}-{model}-{region}"
        local = regional_name(model, region, settings.domain)
        regional = aws.route53.Record(
            f"{name}-regional",
            zone_id=settings.zone_id,
            name=local,
            type="CNAME",
            ttl=TTL_S,
            records=[self._args.ingress_hostnames[region]],
            opts=child,
        )
        check = aws.route53.HealthCheck(
            f"{name}-health",
            type="HTTPS",
            fqdn=local,
            port=443,
            resource_path=settings.health_check_path,
            request_interval=HEALTH_INTERVAL_S,
            failure_threshold=HEALTH_FAILURES,
            measure_latency=True,
            enable_sni=True,
            tags={"Name": local},
            opts=pulumi.ResourceOptions(parent=self, depends_on=[regional]),
        )
        aws.route53.Record(
            f"{name}-weighted",
            zone_id=settings.zone_id,
            name=global_name(model, settings.domain),
            type="CNAME",
            ttl=TTL_S,
            records=[local],
            set_identifier=region,
            weighted_routing_policies=[
                aws.route53.RecordWeightedRoutingPolicyArgs(
                    weight=settings.weights.get(region, DEFAULT_WEIGHT)
                )
            ],
            health_check_id=check.id,
            # The failover controller owns the weights after the first `pulumi up`.
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=["weightedRoutingPolicies"]),
        )
