"""pytest11 plugin ``ray_accel_ext_conformance``: the suite's command-line options, nothing else.

It is loaded into every pytest session where ``ray_accel_ext`` is installed, so it is inert: it
adds ``--accel-*`` options and registers assertion rewriting for the suite's modules; it has no
fixtures that run by themselves and no hooks on other projects' tests. The suite's behaviour
lives in its base classes, which also read the environment variables, so the suite works with
``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1`` too. Block it with ``-p no:ray_accel_ext_conformance``.
"""

from __future__ import annotations

import pytest

pytest.register_assert_rewrite("ray_accel_ext.conformance.base", "ray_accel_ext.conformance._core")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ray_accel_ext conformance")
    group.addoption(
        "--accel-backend", dest="accel_backend", metavar="NAME",
        help="backend to test: an installed entry-point name or 'pkg.mod:Class' "
        "(env RAY_ACCEL_CONFORMANCE_BACKEND; default: the reference FakeBackend)",
    )
    group.addoption(
        "--accel-snapshots", dest="accel_snapshots", metavar="DIR",
        help="host snapshot directory, or folder of them; several joined with ':' "
        "(env RAY_ACCEL_CONFORMANCE_SNAPSHOTS; default: tests/data/hosts/<backend> when present)",
    )
    group.addoption(
        "--accel-xfails", dest="accel_xfails", metavar="FILE",
        help="known failures, one 'BaseXTests::test_y[snap]  # reason link' per line, run as strict xfail "
        "(env RAY_ACCEL_CONFORMANCE_XFAILS)",
    )
    group.addoption(
        "--accel-live-ray", dest="accel_live_ray", action="store_true", default=False,
        help="also start a real Ray node from one snapshot (slow; env RAY_ACCEL_CONFORMANCE_LIVE_RAY=1)",
    )
