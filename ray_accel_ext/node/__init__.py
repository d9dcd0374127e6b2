"""The node-start path, one wing, in reading order:

1. :mod:`.registry` - the backends' entry points (found, checked, loaded by name);
2. :mod:`.isolate` - a third-party backend in a forked worker process;
3. :mod:`.discovery` - every backend against one host, within one deadline;
4. :mod:`.checks` - text no node should publish; :mod:`.host_checks` - what no backend can report;
5. :mod:`.adapter` - a :class:`~ray_accel_ext.model.NodeInventory` to Ray resources and labels;
6. :mod:`.visibility` - counts capped by the process's visible-devices variables;
7. :mod:`.ray_native` - the families Ray detects itself, kept next to ours;
8. :mod:`.handoff` - what Ray's TPU manager and the node's workers read instead of asking again;
9. :mod:`.ray_devices` - vendor families Ray has no manager for, handed on for per-task isolation
   (the workers' side is the top-level ``_ray_accel_ext_devices``, loaded by a ``.pth`` file);
10. :mod:`.hook` - the start paths (``RAY_START_HOOK``, ``ray_accel_ext.init``, ``ray-args``).

:mod:`ray_accel_ext.ray_hook` keeps the published dotted paths.
"""
