"""The calls Ray 2.60's HPUAcceleratorManager makes on ``habana_frameworks.torch.hpu`` (see ../../../README.md)."""

import os


def device_count() -> int:
    return int(os.environ.get("RAY_ACCEL_TEST_HPU_COUNT", "0"))


def is_available() -> bool:
    return device_count() > 0


def is_initialized() -> bool:
    return False  # nothing initialises HPU in the process that starts a Ray node


def get_device_name() -> str:
    return os.environ.get("RAY_ACCEL_TEST_HPU_NAME", "GAUDI3")
