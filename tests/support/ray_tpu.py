"""Run Ray 2.60's own TPU accelerator manager against a host snapshot, for side-by-side checks.

Ray's ``TPUAcceleratorManager`` reads the real machine: ``glob("/dev/accel*")``,
``os.listdir("/dev/vfio")``, ``/sys/kernel/iommu_groups/<g>/devices/*/vendor`` and a hard-coded
``http://metadata.google.internal`` URL. :func:`ray_tpu_node_spec` points exactly those reads at a
snapshot: the module-level ``glob``, ``os`` and ``open`` names *inside*
``ray._private.accelerators.tpu`` only (keyed on ``/dev`` and ``/sys`` paths; everything else
passes through), and its endpoint constant at a loopback metadata fake. It then runs Ray's own
``ResourceAndLabelSpec.resolve()`` (the code path of a real node start) with the snapshot's
``env.json`` as the environment, and returns the TPU part of what Ray would give the node.

This patches Ray's *transport and file access*, never our code, and restores everything on exit.
Used by ``tests/backends/tpu/test_ray_parity.py`` and ``benchmarks/tpu_metadata.py``.
"""

from __future__ import annotations

import builtins
import contextlib
import glob as _glob
import json
import os
import types
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["ray_tpu_node_spec", "rooted_ray_tpu", "RAY_NON_TPU_RESOURCES"]

RAY_NON_TPU_RESOURCES = ("CPU", "memory", "object_store_memory")
_ROOTED = ("/dev", "/sys")


def _rooted(root: Path, path: str) -> str:
    path = os.fspath(path)
    return str(root) + path if path.startswith(_ROOTED) else path


class _RootedOs(types.ModuleType):
    """``os`` for Ray's TPU module: ``listdir`` of ``/dev``/``/sys`` paths reads the snapshot."""

    def __init__(self, root: Path) -> None:
        super().__init__("os")
        self._root = root

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def listdir(self, path: str = ".") -> list[str]:
        return os.listdir(_rooted(self._root, path))


class _RootedGlob(types.ModuleType):
    def __init__(self, root: Path) -> None:
        super().__init__("glob")
        self._root = root

    def __getattr__(self, name: str) -> Any:
        return getattr(_glob, name)

    def glob(self, pattern: str, *args: Any, **kwargs: Any) -> list[str]:
        return _glob.glob(_rooted(self._root, pattern), *args, **kwargs)


@contextlib.contextmanager
def rooted_ray_tpu(rootfs: str | os.PathLike[str], metadata_base: str | None, env: Mapping[str, str]) -> Iterator[Any]:
    """Ray's TPU module reading ``rootfs`` and ``metadata_base`` (``http://127.0.0.1:PORT``)
    with ``env`` as the process environment (TPU_* and other accelerator variables replaced)."""
    from ray._private.accelerators import tpu as ray_tpu

    root = Path(rootfs).resolve()
    saved_env = dict(os.environ)
    saved = {name: ray_tpu.__dict__.get(name, _MISSING) for name in ("glob", "os", "open", "GCE_TPU_ACCELERATOR_ENDPOINT")}
    try:
        for key in list(os.environ):
            if key.startswith(("TPU_", "RAY_TPU_", "RAY_EXPERIMENTAL_NOSET_", "CUDA_", "NEURON_RT_")):
                del os.environ[key]
        os.environ.update(env)
        os.environ["NO_PROXY"] = "127.0.0.1,localhost"
        ray_tpu.glob = _RootedGlob(root)
        ray_tpu.os = _RootedOs(root)
        ray_tpu.open = lambda path, *a, **k: builtins.open(_rooted(root, path), *a, **k)
        base = (metadata_base or "http://127.0.0.1:9").rstrip("/")  # port 9 (discard): refused
        ray_tpu.GCE_TPU_ACCELERATOR_ENDPOINT = f"{base}/computeMetadata/v1/instance/attributes/"
        ray_tpu.TPUAcceleratorManager.get_current_node_num_accelerators.cache_clear()
        yield ray_tpu
    finally:
        ray_tpu.TPUAcceleratorManager.get_current_node_num_accelerators.cache_clear()
        for name, value in saved.items():
            if value is _MISSING:
                ray_tpu.__dict__.pop(name, None)
            else:
                setattr(ray_tpu, name, value)
        os.environ.clear()
        os.environ.update(saved_env)


_MISSING = object()


def ray_tpu_node_spec(snapshot: str | os.PathLike[str], metadata_base: str | None,
                      extra_env: Mapping[str, str] | None = None, *, workers: bool = True) -> dict[str, Any]:
    """What Ray 2.60 alone gives a node on ``snapshot``: ``{"resources": ..., "labels": ...,
    "workers": ...}``.

    Resources leave out ``CPU``, memory and the ``node:<ip>`` resource; labels are Ray's defaults
    (``ray.io/accelerator-type`` and ``ray.io/tpu-*``); ``workers`` is Ray's host count of the
    slice (``TPUAcceleratorManager.get_num_workers_in_current_tpu_pod``, what
    ``ray.util.tpu.get_current_pod_worker_count`` answers), None where Ray has none. ``extra_env``
    is added to the snapshot's ``env.json`` (what a start hook handed Ray's manager). With
    ``workers=False`` the host count is not asked (only what a node start runs).
    """
    from ray._private.resource_and_label_spec import ResourceAndLabelSpec

    snapshot = Path(snapshot)
    env_file = snapshot / "env.json"
    env = {str(k): str(v) for k, v in json.loads(env_file.read_text()).items()} if env_file.is_file() else {}
    env.update(extra_env or {})
    with rooted_ray_tpu(snapshot / "rootfs", metadata_base, env) as ray_tpu:
        spec = ResourceAndLabelSpec(num_cpus=1, num_gpus=0, memory=10**9, object_store_memory=10**8)
        spec.resolve(is_head=False, node_ip_address="10.0.0.1")
        resources = {
            k: (int(v) if float(v).is_integer() else v)
            for k, v in spec.resources.items()
            if k not in RAY_NON_TPU_RESOURCES and not k.startswith("node:")
        }
        count = None
        if workers:
            try:
                count = ray_tpu.TPUAcceleratorManager.get_num_workers_in_current_tpu_pod()
            except Exception:  # noqa: BLE001 - Ray 2.60 raises on a node without a pod type
                count = None
        return {"resources": resources, "labels": dict(spec.labels), "workers": count}
