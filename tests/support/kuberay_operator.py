"""What KubeRay's operator makes of a RayCluster's Ray container: its command, args and environment.

A line-by-line port of ``ray-project/kuberay`` ``ray-operator/controllers/ray/common/pod.go`` at
release tag ``v1.7.0`` (``DefaultHeadPodTemplate``, ``DefaultWorkerPodTemplate``, ``BuildPod``,
``setContainerEnvVars``, ``setMissingRayStartParams``, ``generateRayStartCommand``,
``addWellKnownAcceleratorResources``, ``convertParamMap``, ``updateRayStartParams{Resources,Labels}``),
with ``utils.GetContainerCommand``, ``utils.IsGPUResourceKey``, ``utils.GenerateFQDNServiceName``
and Kubernetes' ``resource.Quantity`` (``Value()`` rounds up, ``AsApproximateFloat64()``). The
quoting matters: KubeRay writes ``--resources='{"TPU":4}'`` with the single quotes inside the
string, which only a shell that parses the string (not ``$VAR`` word splitting) removes.

Left out, because no manifest here uses them: autoscaler, GCS fault tolerance, TLS, token auth,
history-server collector, RayService/RayJob variables, the init container (the test starts the
head first instead), probes, ``ENABLE_LOGIN_SHELL``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

KUBERAY_VERSION = "v1.7.0"
SOURCE = "ray-project/kuberay ray-operator/controllers/ray/common/pod.go @ v1.7.0"

HEAD, WORKER = "head", "worker"
DEFAULT_GCS_PORT = "6379"  # utils.DefaultGcsServerPort
DEFAULT_METRICS_PORT = "8080"  # utils.DefaultMetricsPort
DEFAULT_AGENT_PORT = "52365"  # utils.DefaultDashboardAgentListenPort
OVERWRITE_ANNOTATION = "ray.io/overwrite-container-cmd"
# pod.go customAcceleratorToRayResourceMap
CUSTOM_ACCELERATORS = {"aws.amazon.com/neuroncore": "neuron_cores", "google.com/tpu": "TPU"}
# pod.go: booleans written as --flag=false instead of being dropped
SPECIAL_BOOL_OPTIONS = ("log-color", "include-dashboard", "include-log-monitor")

_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
           "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": 1,
           "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")


def quantity(value: Any) -> Decimal:
    """A Kubernetes quantity ("200", "1600Gi", "500m", "1e3") as an exact number."""
    m = _QUANTITY.match(str(value).strip())
    if not m:
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    number, suffix = Decimal(m.group(1)), m.group(2) or ""
    if suffix[:1] in ("e", "E"):
        return number * (Decimal(10) ** int(suffix[1:]))
    return number * Decimal(_SUFFIX[suffix])


def quantity_value(value: Any) -> int:
    """``Quantity.Value()``: rounded up to an integer."""
    return int(math.ceil(quantity(value)))


def _go_float(x: float) -> str:
    # encoding/json writes float64 in the shortest form, integers without ".0"
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e21 else repr(float(x))


def _go_json_map(values: dict[str, float]) -> str:
    return "{" + ",".join(f"{json.dumps(k)}:{_go_float(v)}" for k, v in sorted(values.items())) + "}"


def is_gpu_resource_key(key: str) -> bool:
    """``utils.IsGPUResourceKey``."""
    return key.endswith("gpu") or re.search(r"nvidia\.com/mig-\d+g\.\d+gb$", key) is not None


def fqdn_service_name(cluster: dict, namespace: str) -> str:
    """``utils.GenerateFQDNServiceName``: the head Service's DNS name."""
    name = cluster["metadata"]["name"]
    head_service = (cluster["spec"]["headGroupSpec"].get("headService") or {}).get("metadata", {}).get("name")
    return f"{head_service or name + '-head-svc'}.{namespace}.svc.cluster.local"


def head_port(head_params: dict[str, str]) -> str:
    """``GetHeadPort``."""
    return head_params.get("port", DEFAULT_GCS_PORT)


def update_params_resources(params: dict[str, str], group_resources: dict[str, str] | None) -> None:
    """``updateRayStartParamsResources``: the group's top-level ``resources`` field."""
    custom: dict[str, float] = {}
    for name, text in (group_resources or {}).items():
        lower = name.lower()
        if lower == "cpu":
            params["num-cpus"] = str(quantity_value(text))
        elif lower == "memory":
            params["memory"] = str(quantity_value(text))
        elif is_gpu_resource_key(lower):
            params["num-gpus"] = str(quantity_value(text))
        else:
            custom[name] = float(quantity(text))
    if custom:
        params["resources"] = f"'{_go_json_map(custom)}'"


def update_params_labels(params: dict[str, str], group_labels: dict[str, str] | None) -> None:
    """``updateRayStartParamsLabels``: the group's top-level ``labels`` field."""
    if group_labels:
        params["labels"] = ",".join(f"{k}={group_labels[k]}" for k in sorted(group_labels))


def set_missing_params(params: dict[str, str], node_type: str, port: str, fqdn: str) -> dict[str, str]:
    """``setMissingRayStartParams``."""
    if node_type == WORKER:
        params.setdefault("address", f"{fqdn}:{port}")
    if node_type == HEAD:
        params.setdefault("dashboard-host", "0.0.0.0")
    params.setdefault("metrics-export-port", DEFAULT_METRICS_PORT)
    params["block"] = "true"
    params.setdefault("dashboard-agent-listen-port", DEFAULT_AGENT_PORT)
    return params


def _resources_map(params: dict[str, str]) -> dict[str, float]:
    if "resources" not in params:
        return {}
    return json.loads(params["resources"].strip("'\"` "))


def add_accelerator_resources(params: dict[str, str], limits: dict[str, Any]) -> None:
    """``addWellKnownAcceleratorResources``: GPUs to ``--num-gpus``, the first custom accelerator
    (in sorted key order) into ``--resources``."""
    if not limits:
        return
    try:
        resources = _resources_map(params)
    except ValueError:
        return  # KubeRay logs the error and leaves the params as they are
    added = any(name in resources for name in CUSTOM_ACCELERATORS.values())
    for key in sorted(limits):
        value = quantity(limits[key])
        if "num-gpus" not in params and is_gpu_resource_key(key) and value != 0:
            params["num-gpus"] = str(quantity_value(limits[key]))
        if not added and key in CUSTOM_ACCELERATORS and value != 0:
            name = CUSTOM_ACCELERATORS[key]
            if name not in resources:
                resources[name] = float(value)
                params["resources"] = f"'{_go_json_map(resources)}'"
            added = True


def convert_param_map(params: dict[str, str]) -> str:
    """``convertParamMap``: `` --key=value `` per entry in key order, booleans as bare flags."""
    out = []
    for option in sorted(params):
        argument = params[option]
        if argument.lower() in ("true", "false") and option not in SPECIAL_BOOL_OPTIONS:
            if argument.lower() == "true":
                out.append(f" --{option} ")
        else:
            out.append(f" --{option}={argument} ")
    return "".join(out)


def generate_ray_start_command(node_type: str, params: dict[str, str], resources: dict[str, Any]) -> str:
    """``generateRayStartCommand``."""
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    if "num-cpus" not in params:
        cpu = limits.get("cpu") if limits.get("cpu") not in (None, 0, "0") else requests.get("cpu")
        if cpu not in (None, 0, "0"):
            params["num-cpus"] = str(quantity_value(cpu))
    if "memory" not in params and limits.get("memory") not in (None, 0, "0"):
        params["memory"] = str(quantity_value(limits["memory"]))
    add_accelerator_resources(params, limits)
    if node_type == HEAD:
        return f"ray start --head {convert_param_map(params)}"
    if node_type == WORKER:
        return f"ray start {convert_param_map(params)}"
    return ""


def _cmd_string(parts: list[str]) -> str:
    return "".join(f" {p} " for p in parts)  # convertCmdToString


@dataclass
class Pod:
    """One Ray pod as the operator builds it: the Ray container's argv and environment."""

    name: str
    group: str
    node_type: str
    argv: list[str]
    env: dict[str, str]
    ray_start_cmd: str
    container: dict


def pod_name_of(cluster: dict, group: str, index: int) -> str:
    """A stand-in for the generated pod name (``<cluster>-head-...``, ``<cluster>-<group>-worker-...``)."""
    name = cluster["metadata"]["name"]
    return f"{name}-head-{index}" if group == "headgroup" else f"{name}-{group}-worker-{index}"


def build_pod(cluster: dict, group: str, index: int = 0, *, namespace: str = "default",
              fqdn: str | None = None, extra_params: dict[str, dict[str, str]] | None = None) -> Pod:
    """The Ray container (``containers[0]``) of pod ``index`` of ``group`` (``"headgroup"`` or a
    worker group's name). ``extra_params[group]`` are merged into that group's ``rayStartParams``
    as a user would write them; ``fqdn`` replaces the head Service's name (a test reaches it on
    loopback)."""
    spec = cluster["spec"]
    name = cluster["metadata"]["name"]
    extra = extra_params or {}
    pod_name = pod_name_of(cluster, group, index)
    if group == "headgroup":
        node_type, group_spec = HEAD, spec["headGroupSpec"]
    else:
        node_type = WORKER
        group_spec = next(g for g in spec.get("workerGroupSpecs", []) if g["groupName"] == group)
    # the head's port, which workers dial too (raycluster_controller.go passes GetHeadPort of the head)
    port = head_port({**(spec["headGroupSpec"].get("rayStartParams") or {}), **extra.get("headgroup", {})})
    fqdn = fqdn or fqdn_service_name(cluster, namespace)
    params = {k: str(v) for k, v in {**(group_spec.get("rayStartParams") or {}), **extra.get(group, {})}.items()}
    update_params_resources(params, group_spec.get("resources"))
    update_params_labels(params, group_spec.get("labels"))
    set_missing_params(params, node_type, port, fqdn)
    container = dict(group_spec["template"]["spec"]["containers"][0])
    ray_start = generate_ray_start_command(node_type, params, container.get("resources") or {})

    command, args = list(container.get("command") or []), list(container.get("args") or [])
    cmd = (_cmd_string(command) if command else "") + (_cmd_string(args) if args else "")
    overwrite = str((cluster["metadata"].get("annotations") or {}).get(OVERWRITE_ANNOTATION, "")).lower() == "true"
    if not overwrite and "ray start" not in cmd:
        generated = f"ulimit -n ${{RAY_START_ULIMIT_OPEN_FILES:-65536}}; {ray_start}"
        command = ["/bin/bash", "-c", "--"]  # utils.GetContainerCommand([]) without ENABLE_LOGIN_SHELL
        args = [f"{cmd} && {generated}" if cmd else generated]

    env = {e["name"]: str(e.get("value", "")) for e in container.get("env") or []}
    ip = "127.0.0.1" if node_type == HEAD else fqdn  # utils.LOCAL_HOST for the head
    if node_type == WORKER:
        env["FQ_RAY_IP"] = ip
        env["RAY_IP"] = ip.split(".")[0]
    env["RAY_CLUSTER_NAME"] = name  # fieldRef metadata.labels['ray.io/cluster']
    env["RAY_CLUSTER_NAMESPACE"] = namespace  # fieldRef metadata.namespace
    env["RAY_CLOUD_INSTANCE_ID"] = pod_name  # fieldRef metadata.name
    env["RAY_NODE_TYPE_NAME"] = group  # fieldRef metadata.labels['ray.io/group']
    env["KUBERAY_GEN_RAY_START_CMD"] = ray_start
    env.setdefault("RAY_PORT", port)
    env.setdefault("RAY_ADDRESS", f"{ip}:{port}")
    env.setdefault("RAY_USAGE_STATS_KUBERAY_IN_USE", "1")
    if node_type == HEAD:
        env["RAY_USAGE_STATS_EXTRA_TAGS"] = f"kuberay_version={KUBERAY_VERSION};kuberay_crd=RayCluster"
    env.setdefault("RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE", "1")
    return Pod(pod_name, group, node_type, command + args, env, ray_start, container)


def pods_of(cluster: dict) -> list[tuple[str, int]]:
    """``(group, host index)`` of every pod of one replica per group: the head, then each worker
    group's ``numOfHosts`` hosts (replicas of a group are identical pods)."""
    out = [("headgroup", 0)]
    for g in cluster["spec"].get("workerGroupSpecs", []):
        out += [(g["groupName"], i) for i in range(int(g.get("numOfHosts") or 1))]
    return out
