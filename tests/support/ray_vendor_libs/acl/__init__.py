"""The calls Ray 2.60's NPUAcceleratorManager makes on AscendCL's ``acl`` module (see ../README.md)."""

import os

ACL_SUCCESS = 0


class _Runtime:
    """``acl.rt``: the runtime API; ``get_device_count()`` returns ``(count, ret)``."""

    @staticmethod
    def get_device_count() -> tuple[int, int]:
        return int(os.environ.get("RAY_ACCEL_TEST_NPU_COUNT", "0")), ACL_SUCCESS


rt = _Runtime()


def get_soc_name() -> str:
    return os.environ.get("RAY_ACCEL_TEST_NPU_SOC", "Ascend910B")
