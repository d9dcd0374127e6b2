"""Subcommands of ``ray-accel``; see :mod:`ray_accel_ext.tools.cli`."""
