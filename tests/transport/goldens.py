"""The golden plans: one reservation per family, planned from the recorded snapshots.

Regenerate after a reviewed change (then read the diff)::

    python -m tests.transport.goldens --update
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ray_accel_ext.transport import plan_transport

from .conftest import domain

GOLDEN = Path(__file__).resolve().parent / "golden"

CASES = {
    # 2 DGX H100 hosts, one rank per GPU: rail NIC per rank, GPUDirect at PIX
    "h100-2-hosts": lambda: plan_transport([domain("nvidia_gpu/h100-sxm-8gpu-dgx", 2)]),
    # 2 trays of one GB200 NVL72 domain: multi-node NVLink switches
    "gb200-nvl72-2-trays": lambda: plan_transport([domain("nvidia_gpu/gb200-nvl72-tray", 2)]),
    # 2 Trn2 hosts, one process per host: Neuron runtime ranks and root, EFA
    "trn2-2-hosts": lambda: plan_transport([domain("neuron/trn2-48xlarge", 2)]),
    # 2 TPU v5p-16 slices of 2 hosts: multi-slice settings
    "v5p-16-2-slices": lambda: plan_transport([domain("tpu/gce-v5p-16-worker1", 2, name="s0"),
                                               domain("tpu/gce-v5p-16-worker1", 2, name="s1")]),
}


def render(name: str) -> str:
    return json.dumps(CASES[name]().to_dict(), indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="rewrite the golden files")
    args = parser.parse_args(argv)
    for name in CASES:
        text = render(name)
        path = GOLDEN / f"{name}.json"
        if args.update:
            path.write_text(text)
            print(f"wrote {path.name}")
        else:
            print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
