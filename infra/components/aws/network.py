"""A region's VPC: private node subnets in every zone, public subnets only for NAT and load
balancers, NAT egress, and endpoints that keep S3 and ECR traffic inside AWS.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from functools import partial

import pulumi
import pulumi_aws as aws

# Private subnets take /(p+3) blocks from the start of the VPC, public ones /(p+6) blocks from
# its last quarter: six zones fit either way, and nodes get the bulk of the addresses.
PRIVATE_EXTRA_BITS = 3
PUBLIC_EXTRA_BITS = 6
PUBLIC_FIRST_BLOCK = 48


def subnet_cidrs(vpc_cidr: str, zones: int) -> tuple[list[str], list[str]]:
    """(private, public) subnet CIDRs of a VPC, one of each per zone."""
    vpc = ipaddress.IPv4Network(vpc_cidr)
    private = list(vpc.subnets(prefixlen_diff=PRIVATE_EXTRA_BITS))[:zones]
    public = list(vpc.subnets(prefixlen_diff=PUBLIC_EXTRA_BITS))[PUBLIC_FIRST_BLOCK:]
    return [str(n) for n in private], [str(n) for n in public[:zones]]


@dataclass(frozen=True)
class NetworkArgs:
    region: str
    cidr: str
    zones: int
    nat_per_zone: bool
    cluster_name: str


def _zone(names: list[str], *, index: int, region: str) -> str:
    if index >= len(names):
        raise ValueError(f"{region} has {len(names)} availability zones; the stack wants more")
    return names[index]


class Network(pulumi.ComponentResource):
    """VPC, subnets, NAT, routes and VPC endpoints of one region."""

    vpc_id: pulumi.Output[str]
    private_subnet_ids: list[pulumi.Output[str]]
    public_subnet_ids: list[pulumi.Output[str]]

    def __init__(self, name: str, args: NetworkArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("radixfleet:aws:Network", name, None, opts)
        self._name, self._args = name, args
        child = pulumi.ResourceOptions(parent=self)
        vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.cidr,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags={"Name": name},
            opts=child,
        )
        self.vpc_id = vpc.id
        # Adopt the default security group and strip its rules: nothing should use it.
        aws.ec2.DefaultSecurityGroup(f"{name}-default-sg", vpc_id=vpc.id, opts=child)
        zones = aws.get_availability_zones_output(
            state="available", region=args.region, opts=pulumi.InvokeOutputOptions(parent=self)
        )
        names = [
            zones.names.apply(partial(_zone, index=i, region=args.region))
            for i in range(args.zones)
        ]
        self._public(vpc, names, child)
        private_tables = self._private(vpc, names, child)
        self._endpoints(vpc, private_tables, child)
        self.register_outputs({"vpcId": vpc.id, "privateSubnetIds": self.private_subnet_ids})

    def _subnet_tags(self, tier: str) -> dict[str, str]:
        # The cloud provider finds subnets for load balancers by these tags.
        role = "elb" if tier == "public" else "internal-elb"
        return {
            "Name": f"{self._name}-{tier}",
            f"kubernetes.io/role/{role}": "1",
            f"kubernetes.io/cluster/{self._args.cluster_name}": "shared",
        }

    def _public(
        self, vpc: aws.ec2.Vpc, zones: list[pulumi.Output[str]], child: pulumi.ResourceOptions
    ) -> None:
        _, public = subnet_cidrs(self._args.cidr, self._args.zones)
        igw = aws.ec2.InternetGateway(f"{self._name}-igw", vpc_id=vpc.id, opts=child)
        table = aws.ec2.RouteTable(
            f"{self._name}-public",
            vpc_id=vpc.id,
            routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=igw.id)],
            opts=child,
        )
        self.public_subnet_ids = []
        self._nat_ids: list[pulumi.Output[str]] = []
        for i, (zone, cidr) in enumerate(zip(zones, public, strict=True)):
            subnet = aws.ec2.Subnet(
                f"{self._name}-public-{i}",
                vpc_id=vpc.id,
                cidr_block=cidr,
                availability_zone=zone,
                # Load balancers get public addresses; nodes never live here.
                map_public_ip_on_launch=False,
                tags=self._subnet_tags("public"),
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{self._name}-public-{i}", subnet_id=subnet.id, route_table_id=table.id, opts=child
            )
            self.public_subnet_ids.append(subnet.id)
            if i == 0 or self._args.nat_per_zone:
                self._nat_ids.append(self._nat(i, subnet, child))

    def _nat(
        self, i: int, subnet: aws.ec2.Subnet, child: pulumi.ResourceOptions
    ) -> pulumi.Output[str]:
        eip = aws.ec2.Eip(f"{self._name}-nat-{i}", domain="vpc", opts=child)
        nat = aws.ec2.NatGateway(
            f"{self._name}-nat-{i}", allocation_id=eip.id, subnet_id=subnet.id, opts=child
        )
        return nat.id

    def _private(
        self, vpc: aws.ec2.Vpc, zones: list[pulumi.Output[str]], child: pulumi.ResourceOptions
    ) -> list[pulumi.Output[str]]:
        private, _ = subnet_cidrs(self._args.cidr, self._args.zones)
        self.private_subnet_ids, tables = [], []
        for i, (zone, cidr) in enumerate(zip(zones, private, strict=True)):
            nat = self._nat_ids[i if self._args.nat_per_zone else 0]
            subnet = aws.ec2.Subnet(
                f"{self._name}-private-{i}",
                vpc_id=vpc.id,
                cidr_block=cidr,
                availability_zone=zone,
                tags=self._subnet_tags("private"),
                opts=child,
            )
            table = aws.ec2.RouteTable(
                f"{self._name}-private-{i}",
                vpc_id=vpc.id,
                routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", nat_gateway_id=nat)],
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{self._name}-private-{i}",
                subnet_id=subnet.id,
                route_table_id=table.id,
                opts=child,
            )
            self.private_subnet_ids.append(subnet.id)
            tables.append(table.id)
        return tables

    def _endpoints(
        self, vpc: aws.ec2.Vpc, tables: list[pulumi.Output[str]], child: pulumi.ResourceOptions
    ) -> None:
        region = self._args.region
        # Model weights are the bulk of the traffic: a gateway endpoint keeps them off NAT.
        aws.ec2.VpcEndpoint(
            f"{self._name}-s3",
            vpc_id=vpc.id,
            service_name=f"com.amazonaws.{region}.s3",
            vpc_endpoint_type="Gateway",
            route_table_ids=tables,
            opts=child,
        )
        sg = aws.ec2.SecurityGroup(
            f"{self._name}-endpoints",
            vpc_id=vpc.id,
            description="HTTPS from inside the VPC to the interface endpoints",
            opts=child,
        )
        aws.vpc.SecurityGroupIngressRule(
            f"{self._name}-endpoints-https",
            security_group_id=sg.id,
            cidr_ipv4=self._args.cidr,
            ip_protocol="tcp",
            from_port=443,
            to_port=443,
            opts=child,
        )
        for service in ("ecr.api", "ecr.dkr"):
            aws.ec2.VpcEndpoint(
                f"{self._name}-{service.replace('.', '-')}",
                vpc_id=vpc.id,
                service_name=f"com.amazonaws.{region}.{service}",
                vpc_endpoint_type="Interface",
                subnet_ids=self.private_subnet_ids,
                security_group_ids=[sg.id],
                private_dns_enabled=True,
                opts=child,
            )
