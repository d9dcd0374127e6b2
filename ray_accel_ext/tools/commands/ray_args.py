"""``ray-accel ray-args``: the resources and labels the start hook would give Ray.

Formats: ``json`` (one object ``{"resources": {...}, "labels": {...}}``), ``flags`` (``ray start``
arguments), ``labels-file`` (YAML for ``--labels-file``), ``env`` (``RAY_OVERRIDE_*`` exports).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from ...node.hook import node_spec
from ._common import add_format_option, add_root_option, check_root, print_json, warn_settings


def register(sub) -> None:
    p = sub.add_parser("ray-args", help="print the Ray resources and labels for this node", description=__doc__)
    add_root_option(p)
    add_format_option(p, ("json", "flags", "labels-file", "env"))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    warn_settings()
    root = check_root(args.root) if args.root else None
    # The very path the start hook takes, so the output is what Ray would get on this node.
    environ = None
    if root:  # a snapshot's recorded metadata served, as the demo's nodes get it
        from .demo import served_metadata

        environ = {**os.environ, **served_metadata(root)}
    spec = node_spec(root, budget_s=args.budget, environ=environ)
    if args.format == "json":
        print_json(spec.to_dict())
    elif args.format == "flags":
        print(" ".join(shlex.quote(f) for f in spec.ray_start_flags()))
    elif args.format == "labels-file":
        sys.stdout.write(spec.labels_yaml())
    else:
        sys.stdout.write(spec.env_exports())
    return 0
