"""Ray's device isolation for accelerator families Ray has no manager for, in every Ray process.

Ray sets a task's visible-devices variable and reports its unit ids
(``ray.get_runtime_context().get_accelerator_ids()``) only for resources owned by a manager in its
private registry (``ray._private.accelerators.get_all_accelerator_managers``) *in the worker
process* (``reference/ray-2.60.md`` sections 3, 4 and 8.3-8.4). A node whose start hook found a
vendor family outside that registry hands the family on in ``RAY_ACCEL_RAY_DEVICES`` (JSON, set
by :mod:`ray_accel_ext.node.ray_devices`); the raylet and every process it starts inherit it.

This module is top level, so a process reaches it without importing the ``ray_accel_ext`` package;
``ray_accel_ext_devices.pth`` (installed with the package) imports it only when that variable is
set, so every other Python process pays one ``os.environ`` lookup at start. Once imported it
installs a meta-path finder that waits for ``ray._private.accelerators`` to be imported (never
importing Ray itself) and then adds one :class:`AcceleratorManager` adapter per handed-on family to
the registry, before ``import ray`` builds its worker (``worker.py`` reads every manager's visible
ids once, at import). Each adapter asks the family's backend, loaded lazily on the first task that
holds its devices, for ``visible_devices_env(devices)``.

A partition family (NVIDIA MIG: ``mig-1g.10gb``) carries ``units``, the visible-devices value of
each of its units (``MIG-<uuid>``), and needs no backend: its adapter writes the units this task
holds into ``CUDA_VISIBLE_DEVICES``, after Ray's own GPU manager (:func:`_partitions_last`), and
reports no visible ids of its own, so Ray never maps its slots through a variable that lists whole
GPUs.

The adapters never count devices themselves (``get_current_node_num_accelerators`` is 0): Ray
resolves one accelerator family per node in hash order, and an adapter that counted would race
Ray's own GPU/TPU/Neuron managers for it (``reference/ray-2.60.md`` 8.5). The node's count is the
one the start hook passes explicitly.
"""

from __future__ import annotations

import os
import sys

ENV = "RAY_ACCEL_RAY_DEVICES"
TARGET = "ray._private.accelerators"
# What a registry must look like for the adapters to work (reference/ray-2.60.md section 1).
REGISTRY_FUNCTIONS = ("get_all_accelerator_managers", "get_all_accelerator_resource_names",
                      "get_accelerator_manager_for_resource")
MANAGER_METHODS = (
    "get_resource_name", "get_visible_accelerator_ids_env_var", "get_current_node_num_accelerators",
    "get_current_node_accelerator_type", "get_current_node_additional_resources",
    "validate_resource_request_quantity", "get_current_process_visible_accelerator_ids",
    "set_current_process_visible_accelerator_ids",
)
_CACHE = "_resource_name_to_accelerator_manager"
_MARK = "_ray_accel_ext_devices"


def families(environ=None) -> list[dict]:
    """The handed-on families: ``resource``, ``backend``, ``entry`` (``module:Class``), ``env_var``,
    ``accelerator_type`` and ``devices`` (``Device.to_dict()`` each); empty when unset or damaged."""
    import json  # here, not at the top: the .pth file imports this module before anything else

    text = (os.environ if environ is None else environ).get(ENV, "")
    try:
        value = json.loads(text) if text else []
    except ValueError:
        return []
    return [f for f in value if isinstance(f, dict) and isinstance(f.get("resource"), str)] if isinstance(value, list) else []


def registry_problem(accelerators) -> str | None:
    """Why ``accelerators`` (Ray's registry module) cannot take adapters; None when it can."""
    missing = [n for n in REGISTRY_FUNCTIONS if not callable(getattr(accelerators, n, None))]
    base = getattr(accelerators, "AcceleratorManager", None)
    if base is None:
        missing.append("AcceleratorManager")
    else:
        missing += [f"AcceleratorManager.{n}" for n in MANAGER_METHODS if not callable(getattr(base, n, None))]
        unknown = sorted(set(getattr(base, "__abstractmethods__", ())) - set(MANAGER_METHODS))
        missing += [f"AcceleratorManager.{n} (new, not implemented by the adapter)" for n in unknown]
    return f"{TARGET} lacks {', '.join(missing)}" if missing else None


class _Backend:
    """The family's backend and devices, loaded on first use in this process."""

    def __init__(self, family: dict) -> None:
        self.family = family
        self._loaded = None

    def env_for(self, ids) -> dict[str, str]:
        if self._loaded is None:
            from ray_accel_ext.model import Device
            from ray_accel_ext.node.registry import load_backend

            entry = self.family.get("entry") or ""
            backend = load_backend(entry, self.family.get("backend")) if entry else None
            devices = {}
            for raw in self.family.get("devices") or ():
                device = Device.from_dict(raw)
                devices[str(device.index)] = device
            self._loaded = (backend, devices)
        backend, devices = self._loaded
        from ray_accel_ext.model import Device

        chosen = [devices.get(str(i)) or Device(index=int(i)) for i in ids]
        if backend is not None:
            return {str(k): str(v) for k, v in backend.visible_devices_env(chosen).items()}
        var = self.family.get("env_var")
        return {var: ",".join(str(i) for i in ids)} if var else {}


def _held_units(partitions: list, own: str, ids) -> list[str]:
    """The unit values (``MIG-<uuid>``) of every partition family this task holds, by resource
    name: each partition adapter writes this same value, so their order does not matter."""
    try:
        import ray

        worker = ray._private.worker.global_worker
        held = {f["resource"]: worker.get_accelerator_ids_for_accelerator_resource(
            f["resource"], f"^{f['resource']}_group_[0-9A-Za-z]+$") for f in partitions}
    except Exception:  # noqa: BLE001 - a Ray without that method: this family's own ids
        held = {own: ids}
    held[own] = held.get(own) or ids
    out = []
    for family in sorted(partitions, key=lambda f: f["resource"]):
        units = family["units"]
        slots = sorted({int(i) for i in held.get(family["resource"]) or ()})
        out += [units[i] for i in slots if 0 <= i < len(units)]
    return out


def _partition_methods(family: dict, partitions: list) -> dict:
    """What differs for a partition family (``units``: the visible-devices value of each unit)."""
    name, var = family["resource"], family.get("env_var") or None

    def set_visible(ids):
        if not ids or var is None:
            return  # never blank the variable: with override-on-zero Ray calls every manager
        os.environ[var] = ",".join(_held_units(partitions, name, [str(i) for i in ids]))

    # None: Ray must not map this family's slots through the variable, which lists whole GPUs.
    return {"get_current_process_visible_accelerator_ids": lambda: None,
            "set_current_process_visible_accelerator_ids": set_visible}


def make_manager(family: dict, partitions: list | None = None):
    """An AcceleratorManager subclass for one handed-on family (Ray calls its static methods);
    ``partitions``: every partition family of the node, for one of them."""
    from ray._private.accelerators.accelerator import AcceleratorManager

    name, var = family["resource"], family.get("env_var") or None
    backend = _Backend(family)

    def visible():
        if var is None or var not in os.environ:
            return None
        text = os.environ[var].strip()
        return [x.strip() for x in text.split(",") if x.strip()] if text and text != "NoDevFiles" else []

    def set_visible(ids):
        try:
            os.environ.update(backend.env_for([str(i) for i in ids]))
        except Exception as exc:  # noqa: BLE001 - a backend failing here must not fail Ray's task start
            print(f"ray_accel_ext: {family.get('backend')}.visible_devices_env failed for ids {list(ids)}: "
                  f"{type(exc).__name__}: {exc}; {var or 'no variable'} set from the ids", file=sys.stderr)
            if var:
                os.environ[var] = ",".join(str(i) for i in ids)

    def validate(quantity):
        if isinstance(quantity, float) and quantity > 1 and not quantity.is_integer():
            return False, f"{name} resource quantities above 1 must be whole numbers, got {quantity}"
        return True, None

    methods = {
        "get_resource_name": lambda: name,
        "get_visible_accelerator_ids_env_var": lambda: var,
        "get_current_node_num_accelerators": lambda: 0,
        "get_current_node_accelerator_type": lambda: family.get("accelerator_type") or None,
        "get_current_node_additional_resources": lambda: None,
        "validate_resource_request_quantity": validate,
        "get_current_process_visible_accelerator_ids": visible,
        "set_current_process_visible_accelerator_ids": set_visible,
        "get_current_node_accelerator_labels": lambda: None,
    }
    if family.get("units") is not None:
        methods.update(_partition_methods(family, partitions or [family]))
    attrs = {k: staticmethod(v) for k, v in methods.items()}
    attrs.update(__module__=__name__, __doc__=f"ray_accel_ext adapter for {family.get('backend')} ({name})")
    return type(f"RayAccelExt_{family.get('backend') or name}_Manager", (AcceleratorManager,), attrs)


def install(found=None) -> list[str]:
    """Add adapters for the handed-on families to Ray's registry in this process (idempotent);
    returns the resource names added. Families Ray already has a manager for are left to Ray."""
    import ray._private.accelerators as acc

    found = families() if found is None else found
    if not found or registry_problem(acc) is not None:
        return []
    original = getattr(acc.get_all_accelerator_managers, _MARK, acc.get_all_accelerator_managers)
    own = {m.get_resource_name() for m in original()}
    found = [f for f in found if f["resource"] not in own]
    partitions = [f for f in found if f.get("units") is not None]
    managers = [make_manager(f, partitions) for f in found]
    if not managers:
        return []

    def get_all_accelerator_managers():
        return set(original()) | set(managers)

    setattr(get_all_accelerator_managers, _MARK, original)
    acc.get_all_accelerator_managers = get_all_accelerator_managers
    if partitions:
        _partitions_last(acc, {f["resource"] for f in partitions})
    # get_accelerator_manager_for_resource caches name -> manager on first use (during `import ray`).
    acc.get_accelerator_manager_for_resource.__dict__.pop(_CACHE, None)
    return [m.get_resource_name() for m in managers]


class _PartitionsLast(set):
    """Resource names that iterate in a fixed order: sorted, partition families last."""

    last: frozenset = frozenset()

    def __iter__(self):
        return iter(sorted(set.__iter__(self), key=lambda n: (n in self.last, n)))


def _partitions_last(acc, last: set) -> None:
    """Make a partition family's variable win over Ray's own GPU manager, which writes
    CUDA_VISIBLE_DEVICES too: its ids for a task with ``num_gpus``, and "" for every task without
    GPUs while RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO is on (Ray 2.55's default; off by default in
    2.60). Ray calls the managers in the order of ``get_accelerator_ids()``'s dict
    (``ray/_private/utils.py`` set_visible_accelerator_ids: 2.60 lines 288-305, 2.55 lines 283-295),
    which is the iteration order of ``get_all_accelerator_resource_names()``
    (``ray/runtime_context.py:589-596`` in both): a set of strings, in an order that changes with
    each process's hash seed. Iterated with the partitions last, the partition adapter writes last."""
    original = getattr(acc.get_all_accelerator_resource_names, _MARK, acc.get_all_accelerator_resource_names)
    ordered = type("_Ordered", (_PartitionsLast,), {"last": frozenset(last)})

    def get_all_accelerator_resource_names():
        return ordered(original())

    setattr(get_all_accelerator_resource_names, _MARK, original)
    acc.get_all_accelerator_resource_names = get_all_accelerator_resource_names


def _install_quietly() -> None:
    try:
        install()
    except Exception as exc:  # noqa: BLE001 - never break Ray's import
        print(f"ray_accel_ext: device isolation not installed in this process: {type(exc).__name__}: {exc}",
              file=sys.stderr)


class _Finder:
    """Meta-path finder that runs :func:`install` right after ``ray._private.accelerators`` loads."""

    def find_spec(self, fullname, path, target=None):
        if fullname != TARGET:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module):
            original(module)
            _install_quietly()

        loader.exec_module = exec_module
        return spec


def activate() -> None:
    """Install now if Ray's registry is loaded, else when it is (the ``.pth`` file calls this)."""
    if TARGET in sys.modules:
        _install_quietly()
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
