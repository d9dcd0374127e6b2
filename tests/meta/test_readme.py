"""The README's vendor backend is the one docs/vendors.md tests against the suite."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.paths import REPO
from tests.support.vendor_example import MAX_EXAMPLE_LINES, example_lines


def _python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


def test_readme_backend_is_the_tested_one():
    readme_blocks = _python_blocks(REPO / "README.md")
    tested = _python_blocks(REPO / "docs" / "vendors.md")[0]
    assert tested in readme_blocks, "README's vendor backend drifted from docs/vendors.md (which a test runs)"
    assert example_lines(tested) <= MAX_EXAMPLE_LINES, "the README example must stay short (about 30 lines)"


def test_readme_names_the_two_commands_and_ci_runs_one_of_them():
    readme = (REPO / "README.md").read_text()
    assert "bash ci/demo.sh" in readme and "bash ci/test.sh" in readme
    assert "ci/test.sh" in (REPO / ".ci" / "run").read_text()


def test_cli_works_without_test_dependencies():
    """The demo's install (extra [ray]) has no pytest: every subcommand must still load."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "for name in ('pytest', 'hypothesis', 'yaml', '_pytest'):\n"
        "    sys.modules[name] = None  # importing them now raises ImportError\n"
        "from ray_accel_ext.tools.cli import main\n"
        "sys.exit(main(['ray-args', '--root', sys.argv[1], '--format', 'flags']))\n"
    )
    snapshot = REPO / "tests/data/hosts/nvidia_gpu/l4-single-pcie"
    out = subprocess.run([sys.executable, "-c", code, str(snapshot)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "--num-gpus 1" in out.stdout
