"""Where users were told the start paths are: ``RAY_START_HOOK=ray_accel_ext.ray_hook.start_hook``
and :func:`init`. The node path itself is the :mod:`ray_accel_ext.node` wing (:mod:`.node.hook`)."""

from __future__ import annotations

from .node.hook import HOOK_GRACE_S, hand_off, init, merge_into_init_kwargs, merge_into_params, node_spec, start_hook

__all__ = ["start_hook", "init", "node_spec", "merge_into_params", "merge_into_init_kwargs", "hand_off", "HOOK_GRACE_S"]
