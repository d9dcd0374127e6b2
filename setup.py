"""Installs ``ray_accel_ext_devices.pth`` next to the package (wheel, sdist and editable installs).

Everything else is declared in ``pyproject.toml``. The ``.pth`` file runs one ``os.environ``
lookup in every Python process of the environment and imports ``_ray_accel_ext_devices`` only
when a node handed on a family for Ray to isolate (docs/vendors.md, "What a backend gets at
runtime").
"""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH = "ray_accel_ext_devices.pth"
HERE = Path(__file__).resolve().parent


class BuildPyWithPth(build_py):
    def run(self):
        super().run()
        self.copy_file(str(HERE / PTH), str(Path(self.build_lib) / PTH))

    def get_outputs(self, include_bytecode=True):
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH)]


class _WithPth:
    """An editable-install strategy that also writes the ``.pth`` file into the wheel."""

    def __init__(self, strategy):
        self.strategy = strategy

    def __call__(self, wheel, files, mapping):
        self.strategy(wheel, files, mapping)
        wheel.writestr(PTH, (HERE / PTH).read_bytes())

    def __enter__(self):
        self.strategy.__enter__()
        return self

    def __exit__(self, *exc):
        return self.strategy.__exit__(*exc)


class EditableWheelWithPth(editable_wheel):
    def _select_strategy(self, *args, **kwargs):
        return _WithPth(super()._select_strategy(*args, **kwargs))


setup(cmdclass={"build_py": BuildPyWithPth, "editable_wheel": EditableWheelWithPth})
