"""EC2 ``DescribeInstanceTopology``: where an instance sits in AWS's network (optional extra ``[aws]``).

``NetworkNodes`` lists the network nodes above the instance, top layer first (AWS "How instance
topology works"); we map them to :class:`~ray_accel_ext.model.Location` as

* three or more nodes: ``cluster`` = first, ``block`` = second to last, ``rack`` = last;
* two nodes: ``block`` = first, ``rack`` = last; one node: ``rack``.

:func:`with_network_topology` adds it to the location of any EC2 host, whatever its accelerator
family (P4d/P5/P6 GPUs and Trn/Inf Neuron hosts alike; AWS lists the instance types it covers).
It needs ``boto3`` (``pip install ray-accel-ext[aws]``), credentials from boto3's usual chain
(instance profile, IRSA or EKS Pod Identity, environment) allowed ``ec2:DescribeInstanceTopology``
(``deploy/kuberay/eks-topology-iam-policy.json``), and is opt-in per node:
``RAY_ACCEL_AWS_TOPOLOGY=1``, because every node start costs one API call against the account's
request limit. ``RAY_ACCEL_EC2_API_ENDPOINT`` redirects the call (tests point it at
:mod:`ray_accel_ext.testing.fake_ec2`). Without boto3 or credentials the feature is simply
unavailable: :func:`describe_instance_topology` returns None. Calls are bounded by a timeout and
made once, without retries; API errors raise :class:`~ray_accel_ext.errors.ProviderError`.
An answer is kept for the instance's current boot (:mod:`.topology_cache`): a node restarted on
the same boot imports no boto3 and makes no call.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import (
    ProviderError,
    ProviderRateLimited,
    ProviderServerError,
    ProviderTimeout,
)
from ..host import Host
from ..host.protocol import AWS_TOPOLOGY_ENV as ENABLE_ENV
from ..host.protocol import EC2_API_ENDPOINT_ENV as ENDPOINT_ENV
from ..model import Location, Problem
from ..problems import LIBRARY_MISSING, METADATA_ERROR, METADATA_TIMEOUT
from . import topology_cache

__all__ = [
    "ENABLE_ENV", "ENDPOINT_ENV", "InstanceTopology", "enabled", "boto3_available", "describe_instance_topology",
    "with_network_topology",
]

_THROTTLED = {"RequestLimitExceeded", "Throttling", "ThrottlingException"}
API_TIMEOUT_S = 1.0
# Budget kept for reading sysfs and building the description after the network lookup.
_DESCRIBE_RESERVE_S = 0.5


@dataclass(frozen=True, slots=True)
class InstanceTopology:
    """One instance's entry of ``DescribeInstanceTopology``."""

    instance_id: str
    network_nodes: tuple[str, ...]
    capacity_block_id: str | None = None

    def levels(self) -> tuple[str | None, str | None, str | None]:
        """(cluster, block, rack) from the top-down ``NetworkNodes``."""
        nodes = self.network_nodes
        if len(nodes) >= 3:
            return nodes[0], nodes[-2], nodes[-1]
        if len(nodes) == 2:
            return None, nodes[0], nodes[1]
        if len(nodes) == 1:
            return None, None, nodes[0]
        return None, None, None


def enabled(env: Mapping[str, str]) -> bool:
    """True when ``RAY_ACCEL_AWS_TOPOLOGY`` asks for the call."""
    return env.get(ENABLE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def boto3_available() -> bool:
    """True when the ``[aws]`` extra (boto3) is installed; nothing is imported."""
    if "boto3" in sys.modules:
        return sys.modules["boto3"] is not None  # None: imports of it are blocked
    return importlib.util.find_spec("boto3") is not None


def describe_instance_topology(
    env: Mapping[str, str], *, instance_id: str, region: str, timeout_s: float
) -> InstanceTopology | None:
    """The topology of ``instance_id``; None without boto3, without credentials, or when EC2
    does not (yet) list the instance. Raises ProviderError subclasses on API failures."""
    if not boto3_available():
        return None
    import boto3  # lazy: the [aws] extra is optional and slow to import
    import botocore.session
    from botocore.config import Config
    from botocore.exceptions import (
        BotoCoreError,
        ClientError,
        ConnectTimeoutError,
        EndpointConnectionError,
        ReadTimeoutError,
    )

    endpoint = env.get(ENDPOINT_ENV) or None
    where = endpoint or f"ec2.{region}.amazonaws.com"
    timeout = max(0.05, timeout_s)
    core = botocore.session.Session()
    # The credential chain may ask IMDS for an instance-profile role: keep it inside our bound.
    core.set_config_variable("metadata_service_timeout", timeout)
    core.set_config_variable("metadata_service_num_attempts", 1)
    session = boto3.session.Session(botocore_session=core, region_name=region)
    try:
        if session.get_credentials() is None:
            return None
        client = session.client(
            "ec2",
            endpoint_url=endpoint,
            config=Config(connect_timeout=timeout, read_timeout=timeout, retries={"total_max_attempts": 1}),
        )
        response = client.describe_instance_topology(InstanceIds=[instance_id])
    except ClientError as exc:
        error = exc.response.get("Error", {})
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        code = error.get("Code", "?")
        cls = ProviderRateLimited if code in _THROTTLED or status == 429 else ProviderServerError
        raise cls(f"DescribeInstanceTopology: {code}: {error.get('Message', '')}".rstrip(": "),
                  endpoint=where, status=status) from None
    except (ConnectTimeoutError, ReadTimeoutError):
        raise ProviderTimeout(f"DescribeInstanceTopology: no answer within {timeout:.2f}s",
                              endpoint=where) from None
    except EndpointConnectionError:
        raise ProviderServerError(f"DescribeInstanceTopology: cannot connect to {where}", endpoint=where) from None
    except BotoCoreError as exc:
        raise ProviderServerError(f"DescribeInstanceTopology: {type(exc).__name__}: {exc}",
                                  endpoint=where) from None
    for item in response.get("Instances") or []:
        if item.get("InstanceId") == instance_id:
            return InstanceTopology(
                instance_id=instance_id,
                network_nodes=tuple(str(n) for n in item.get("NetworkNodes") or ()),
                capacity_block_id=item.get("CapacityBlockId") or None,
            )
    return None


def with_network_topology(host: Host, location: Location, problems: list[Problem]) -> Location:
    """``location`` with cluster/block/rack from ``DescribeInstanceTopology`` when the node opts in
    (``RAY_ACCEL_AWS_TOPOLOGY=1``); what went wrong goes into ``problems``, never raised."""
    if not enabled(host.env):
        return location
    kept = _kept(host, location)
    if kept is not None:
        return kept
    if not boto3_available():
        problems.append(Problem(code=LIBRARY_MISSING, message=f"{ENABLE_ENV} is set but boto3 (the [aws] extra) is not installed"))
        return location
    try:
        instance_id = host.metadata.imds("instance-id")
    except ProviderError as exc:
        problems.append(Problem.of(exc, f"EC2 IMDS instance-id: {exc.reason()}"))
        return location
    if not instance_id or not location.region:
        problems.append(Problem(code=METADATA_ERROR, message="DescribeInstanceTopology skipped: instance id or region unknown"))
        return location
    # boto3's import and credential chain are not bounded by the HTTP timeout: run the lookup in
    # its own thread and stop waiting while there is still budget to describe the devices.
    outcome: dict[str, object] = {}

    def lookup() -> None:
        try:
            outcome["topology"] = describe_instance_topology(
                host.env,
                instance_id=instance_id.strip(),
                region=location.region or "",
                timeout_s=min(API_TIMEOUT_S, host.deadline.remaining() / 2),
            )
        except Exception as exc:  # noqa: BLE001 - reported below, never raised into discovery
            outcome["error"] = exc

    worker = threading.Thread(target=lookup, name="ray-accel-ec2-topology", daemon=True)
    worker.start()
    worker.join(max(0.0, host.deadline.remaining() - _DESCRIBE_RESERVE_S))
    if worker.is_alive():
        problems.append(Problem(code=METADATA_TIMEOUT,
                                message="DescribeInstanceTopology: no answer within the discovery budget (boto3 import, "
                                        "credentials or the API); rack/block/cluster left unknown"))
        return location
    error = outcome.get("error")
    if isinstance(error, ProviderError):
        problems.append(Problem.of(error, f"{type(error).__name__}: {error.message}"))
        return location
    if error is not None:
        problems.append(Problem(code=METADATA_ERROR, message=f"DescribeInstanceTopology: {type(error).__name__}: {error}"))
        return location
    topo = outcome.get("topology")
    if not isinstance(topo, InstanceTopology):
        return location
    cluster, block, rack = topo.levels()
    topology_cache.store(host, host.env, _CACHE_KIND, topo.instance_id, {"region": location.region,
                                                                       "network_nodes": list(topo.network_nodes)})
    return dataclasses.replace(location, cluster=cluster, block=block, rack=rack)


_CACHE_KIND = "ec2-topology"


def _kept(host: Host, location: Location) -> Location | None:
    """``location`` with the levels kept from this boot's earlier answer, if there is one."""
    try:
        instance_id = (host.metadata.imds("instance-id") or "").strip()
    except ProviderError:
        return None  # asked again below, and reported there
    value = topology_cache.load(host, host.env, _CACHE_KIND, instance_id) if instance_id else None
    if not isinstance(value, dict) or value.get("region") != location.region:
        return None
    nodes = value.get("network_nodes")
    if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
        return None
    cluster, block, rack = InstanceTopology(instance_id, tuple(nodes)).levels()
    return dataclasses.replace(location, cluster=cluster, block=block, rack=rack)
