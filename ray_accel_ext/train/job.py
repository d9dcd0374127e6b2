"""Ray Train on reserved domains: one call reserves, plans the transport, and returns what a
trainer needs.

    from ray.train import RunConfig
    from ray.train.torch import TorchTrainer
    from ray_accel_ext.placement import DomainRequest
    from ray_accel_ext.train import reserve_for_training

    with reserve_for_training(DomainRequest(hosts=4, selector={"ray.io/accelerator-type": "GB200"})) as job:
        trainer = TorchTrainer(train_fn, scaling_config=job.scaling_config(),
                               torch_config=job.torch_config(), run_config=RunConfig(...))
        result = job.fit(trainer)   # hosts handed to Ray Train; domain released when fit returns or raises

* :meth:`TrainJob.scaling_config`: one worker per plan rank, ``resources_per_worker`` = the rank's
  units (``GPU``, ``neuron_cores``; TPU below), and a per-worker ``label_selector`` on
  ``ray.io/node-id`` in rank order, so worker ``i`` is placed on rank ``i``'s host (Ray Train
  gives bundle ``i`` selector ``i``, and numbers the workers node by node in bundle order).
* :meth:`TrainJob.torch_config` / :meth:`TrainJob.jax_config`: the framework config with the plan
  attached; each worker applies its rank's variables before the process group / JAX starts.
* :meth:`TrainJob.fit`: hands the hosts over (:class:`~.lease.ClaimLease`), runs
  ``trainer.fit()``, releases the domains in ``finally``.

``domains=N`` reserves N domains with the same chain (TPU multi-slice, or several NVLink domains),
planned in the order of their names.

TPU: Ray Train v2 refuses ``TPU`` in ``resources_per_worker`` unless ``use_tpu=True``, and refuses
label selectors with ``use_tpu=True`` (it then reserves slices itself;
``ScalingConfig._validate_tpu_config`` in ``ray/train/v2/api/config.py``, Ray 2.60). So for TPU
the reservation's placement group keeps holding the chips for the whole job (no hand-over, no
window for other work), and the Train workers, pinned to the slice hosts by their label
selectors, hold CPUs only: one worker per host, the only process there that opens the chips
(libtpu's default, every local chip). ``jax_config()`` still initialises JAX for TPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..labels import NODE_ID as NODE_ID_KEY
from ..placement import DomainRequest, reserve
from ..transport import TransportPlan, plan_reservation
from .lease import ClaimLease

__all__ = ["TrainJob", "reserve_for_training"]


class TrainJob:
    """Reserved domains, their transport plan, and the Ray Train configs that follow from them."""

    def __init__(self, reservations: list[Any], plan: TransportPlan, lease_ttl_s: float = 60.0) -> None:
        self.reservations = reservations
        self.plan = plan
        self._lease = ClaimLease(reservations, lease_ttl_s)
        self._released = False

    @property
    def domains(self) -> list[str]:
        return [d.id for d in self.plan.domains]

    def label_selectors(self) -> list[dict[str, str]]:
        """One selector per worker, in rank order: the node of that rank."""
        return [{NODE_ID_KEY: node} for node in self.plan.node_ids()]

    @property
    def workers_hold_devices(self) -> bool:
        """False for TPU: the reservation keeps the chips (see the module doc), workers hold CPUs."""
        return bool(self.plan.resource) and self.plan.resource != "TPU"

    def resources_per_worker(self, cpus: float = 1.0, extra: Mapping[str, float] | None = None) -> dict[str, float]:
        out: dict[str, float] = {}
        if self.workers_hold_devices:
            out[self.plan.resource] = float(self.plan.units_per_rank)
        if cpus:
            out["CPU"] = float(cpus)
        out.update(extra or {})
        return out

    def scaling_config(self, *, cpus_per_worker: float = 1.0, extra_resources: Mapping[str, float] | None = None,
                       **kwargs: Any):
        """``ray.train.ScalingConfig`` with one worker per rank, pinned to the ranks' hosts."""
        from ray.train import ScalingConfig

        resources = self.resources_per_worker(cpus_per_worker, extra_resources)
        if not any(q > 0 for q in resources.values()):
            raise ValueError("a Train worker must ask for some resource: give cpus_per_worker > 0 "
                             "(TPU workers hold CPUs only, the reservation keeps the chips)")
        return ScalingConfig(
            num_workers=self.plan.world_size,
            use_gpu=self.plan.resource == "GPU",
            resources_per_worker=resources,
            label_selector=self.label_selectors(),
            **kwargs,
        )

    def torch_config(self, **kwargs: Any):
        """``TorchConfig(**kwargs)`` that applies the plan in each worker (needs torch)."""
        from .torch_config import PlannedTorchConfig

        return PlannedTorchConfig(transport_plan=self.plan, **kwargs)

    def jax_config(self, **kwargs: Any):
        """``JaxConfig(**kwargs)`` that applies the plan in each worker; ``use_tpu`` defaults to True
        when the ranks hold TPU chips."""
        from .jax_config import PlannedJaxConfig

        kwargs.setdefault("use_tpu", self.plan.resource == "TPU")
        kwargs.setdefault("use_gpu", self.plan.resource == "GPU")
        return PlannedJaxConfig(transport_plan=self.plan, **kwargs)

    def hand_over(self) -> None:
        """Give the reserved devices to the framework's placement group; keep the domains claimed.
        Nothing to hand over when the workers do not hold the devices (TPU)."""
        if self.workers_hold_devices:
            self._lease.start()

    def fit(self, trainer: Any):
        """``trainer.fit()`` on the reserved hosts; the domains are released when it returns or raises."""
        try:
            self.hand_over()
            return trainer.fit()
        finally:
            self.release()

    def release(self) -> None:
        """Give the domains back (idempotent)."""
        if self._released:
            return
        self._released = True
        self._lease.release()

    def __enter__(self) -> "TrainJob":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def reserve_for_training(
    *steps: DomainRequest,
    domains: int = 1,
    units_per_rank: int | None = None,
    ports: Mapping[str, int] | None = None,
    lease_ttl_s: float = 60.0,
    probe_timeout_s: float = 60.0,
    **reserve_kwargs: Any,
) -> TrainJob:
    """Reserve ``domains`` domains (each with the fallback chain ``steps``) and plan their transport.

    Raises what :func:`~ray_accel_ext.placement.reserve` raises; domains already reserved are
    released first. ``units_per_rank``: accelerator units per Train worker (default: one GPU, or
    every TPU chip / NeuronCore of a host).
    """
    if domains < 1:
        raise ValueError("domains must be >= 1")
    held: list[Any] = []
    try:
        for _ in range(domains):
            held.append(reserve(*steps, **reserve_kwargs))
        held.sort(key=lambda r: r.domain)
        plan = plan_reservation(*held, units_per_rank=units_per_rank, ports=ports, probe_timeout_s=probe_timeout_s)
    except BaseException:
        for r in held:
            r.release()
        raise
    return TrainJob(held, plan, lease_ttl_s)
