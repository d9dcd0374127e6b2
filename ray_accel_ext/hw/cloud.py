"""Where a host sits: its own identity, and the provider's network hierarchy when there is one.

The provider is recognised without the network, from DMI (``/sys/class/dmi/id``): GCE sets
``product_name`` to ``Google Compute Engine``; EC2 Nitro sets ``sys_vendor`` to ``Amazon EC2`` and
``product_name`` to the instance type. Only then are metadata servers asked, through
``host.metadata`` (bounded by the discovery deadline).

Mapping to :class:`~ray_accel_ext.model.Location`:

* GCP ``physical_host_topology`` ``{cluster, block, subBlock, host}``: cluster, block, and
  ``subBlock`` as the rack (the sub-block is the rack-level group of hosts);
* AWS ``DescribeInstanceTopology`` ``NetworkNodes`` (top first): cluster, block, rack, for every
  EC2 host that opts in (:func:`ray_accel_ext.hw.aws_topology.with_network_topology`, ``[aws]`` extra).
"""

from __future__ import annotations

import re

from ..bounds import bounded_json
from ..errors import HostReadError, ProviderError
from ..host import Host
from ..labels import sanitize_value
from ..model import Fabric, Location, Problem
from ..problems import DEGRADED, METADATA_ERROR
from . import aws_topology

__all__ = ["cloud_provider", "dmi", "hostname", "host_fabric", "location", "gcp_location", "aws_location"]

_AWS_TYPE_RE = re.compile(r"^[a-z][a-z0-9-]*\.[0-9]*[a-z]+$")


def dmi(host: Host, field: str) -> str | None:
    """A DMI id field (``product_name``, ``sys_vendor``), stripped; None when absent/unreadable."""
    try:
        text = host.read_optional(f"/sys/class/dmi/id/{field}")
    except HostReadError:
        return None
    return text.strip() if text else None


def cloud_provider(host: Host) -> str | None:
    """``gcp``, ``aws`` or None, from DMI alone."""
    product = dmi(host, "product_name") or ""
    if product == "Google Compute Engine":
        return "gcp"
    vendor = dmi(host, "sys_vendor") or ""
    if vendor == "Amazon EC2" or _AWS_TYPE_RE.match(product):
        return "aws"
    return None


def hostname(host: Host) -> str | None:
    """The host's name (``/proc/sys/kernel/hostname``, else ``/etc/hostname``), else its
    ``/etc/machine-id``; None when none of them is readable."""
    for path in ("/proc/sys/kernel/hostname", "/etc/hostname", "/etc/machine-id"):
        try:
            text = host.read_optional(path, max_bytes=4096)
        except HostReadError:
            continue
        if text and text.strip() and sanitize_value(text.strip()):
            return text.strip()
    return None


def host_fabric(host: Host, problems: list[Problem] | None = None) -> Fabric:
    """The domain of a host that is in no larger fabric: itself.

    Without a readable host name the domain id would not be unique (two such hosts would look
    like one domain to placement), so that is a problem line in ``problems``.
    """
    name = hostname(host)
    if name is None and problems is not None:
        problems.append(Problem(
            code=DEGRADED,
            message="no readable host name (/proc/sys/kernel/hostname, /etc/hostname, /etc/machine-id): "
                    "this host's fabric domain id 'unknown-host' is not unique",
        ))
    return Fabric(kind="host", id=sanitize_value(name or "") or "unknown-host", hosts=1, worker=0)


def location(host: Host, problems: list[Problem]) -> Location:
    """The provider's location of a host, asked only when DMI says it is a GCE or EC2 instance;
    an empty :class:`Location` elsewhere."""
    provider = cloud_provider(host)
    if provider == "gcp":
        return gcp_location(host, problems)
    if provider == "aws":
        return aws_location(host, problems)
    return Location()


def gcp_location(host: Host, problems: list[Problem]) -> Location:
    """Zone and ``physical_host_topology`` from the GCE metadata server."""
    md = host.metadata
    try:
        zone_path = md.gce("instance/zone")  # projects/<number>/zones/us-central2-b
        machine = md.gce("instance/machine-type")
        topo_text = md.gce_attribute("physical_host_topology")
    except ProviderError as exc:
        problems.append(Problem.of(exc, f"GCE metadata: {exc.message}"))
        return Location(provider="gcp")
    zone = zone_path.rsplit("/", 1)[-1] if zone_path else None
    cluster = block = rack = None
    if topo_text:
        try:
            topo = bounded_json(topo_text, what="JSON")
            if not isinstance(topo, dict):
                raise ValueError("not a JSON object")
            cluster, block, rack = topo.get("cluster"), topo.get("block"), topo.get("subBlock")
        except ValueError as exc:
            problems.append(Problem(code=METADATA_ERROR, message=f"GCE metadata physical_host_topology: unparsable ({exc})"))
    return Location(
        provider="gcp",
        instance_type=machine.rsplit("/", 1)[-1] if machine else None,
        region=zone.rsplit("-", 1)[0] if zone else None,
        zone=zone,
        cluster=_str(cluster),
        block=_str(block),
        rack=_str(rack),
    )


def aws_location(host: Host, problems: list[Problem]) -> Location:
    """Instance type, region and zone (DMI first, then IMDSv2), and with ``RAY_ACCEL_AWS_TOPOLOGY=1``
    the instance topology's cluster, block and rack."""
    instance_type = dmi(host, "product_name")
    if instance_type and not _AWS_TYPE_RE.match(instance_type):
        instance_type = None
    try:
        zone = host.metadata.imds("placement/availability-zone")
        region = host.metadata.imds("placement/region")
        if instance_type is None:
            instance_type = host.metadata.imds("instance-type")
    except ProviderError as exc:
        problems.append(Problem.of(exc, f"EC2 IMDS: {exc.reason()}"))
        return Location(provider="aws", instance_type=instance_type)
    location = Location(provider="aws", instance_type=_str(instance_type), region=_str(region), zone=_str(zone))
    return aws_topology.with_network_topology(host, location, problems)


def _str(value: object) -> str | None:
    return str(value).strip() if value not in (None, "") else None
