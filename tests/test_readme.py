"""The README's vendor backend is the one docs/vendors.md tests against the suite."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


def test_readme_backend_is_the_tested_one():
    readme_blocks = _python_blocks(REPO / "README.md")
    tested = _python_blocks(REPO / "docs" / "vendors.md")[0]
    assert tested in readme_blocks, "README's vendor backend drifted from docs/vendors.md (which a test runs)"
    assert len(tested.strip().splitlines()) <= 45


def test_readme_names_the_two_commands_and_ci_runs_one_of_them():
    readme = (REPO / "README.md").read_text()
    assert "bash ci/demo.sh" in readme and "bash ci/test.sh" in readme
    assert "ci/test.sh" in (REPO / ".ci" / "run").read_text()
