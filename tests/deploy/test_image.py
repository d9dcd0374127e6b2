"""The image's install step, run as the Dockerfile runs it, into a fresh virtual environment.

deploy/kuberay/Dockerfile mounts the build context (the repository, less what ``.dockerignore``
leaves out) and runs ``deploy/kuberay/install-from-source.sh CONTEXT "${EXTRAS}" python``. Here the
same script runs on a copy of that context into a new venv (no Docker needed; the base image's
part is only "a Python with pip"), which must then answer as the package: ``ray-accel --version``
and the node spec of a host snapshot, from outside the source tree. Needs the package index for
the build backend (setuptools) and psutil, as ``docker build`` does.
"""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.support.paths import REPO

SCRIPT = "deploy/kuberay/install-from-source.sh"
SNAPSHOT = REPO / "tests" / "data" / "hosts" / "nvidia_gpu" / "l4-single-pcie"


def _context(dest: Path) -> Path:
    """The build context: files git knows of (tracked or not ignored), minus ``.dockerignore``."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, check=True).stdout.decode().split("\0")
    patterns = [line.strip() for line in (REPO / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    for name in filter(None, listed):
        parts = Path(name).parts
        if any(fnmatch.fnmatch(name, p.lstrip("*/")) or fnmatch.fnmatch(parts[0], p) or
               any(fnmatch.fnmatch(part, p.replace("**/", "")) for part in parts) for p in patterns):
            continue
        src, out = REPO / name, dest / name
        if src.is_file() or src.is_symlink():
            out.parent.mkdir(parents=True, exist_ok=True)
            out.symlink_to(src.readlink()) if src.is_symlink() else out.write_bytes(src.read_bytes())
    return dest


def test_the_dockerfile_runs_this_script():
    dockerfile = (REPO / "deploy" / "kuberay" / "Dockerfile").read_text()
    assert re.search(rf"bash /tmp/ray-accel-ext-src/{re.escape(SCRIPT)} /tmp/ray-accel-ext-src \"\$\{{EXTRAS\}}\" python",
                     dockerfile)


def test_install_from_the_build_context_into_a_fresh_venv(tmp_path):
    context = _context(tmp_path / "context")
    assert (context / "pyproject.toml").is_file() and not (context / ".venv").exists()
    before = sorted(p.relative_to(context) for p in context.rglob("*"))
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    proc = subprocess.run(["bash", str(context / SCRIPT), str(context), "", str(python)], capture_output=True,
                          text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "ray-accel-ext 0.1.0 installed" in proc.stdout
    assert sorted(p.relative_to(context) for p in context.rglob("*")) == before, "the context is left as it was"

    run = lambda *argv: subprocess.run([str(env_dir / "bin" / "ray-accel"), *argv], capture_output=True, text=True,  # noqa: E731
                                       timeout=120, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})
    version = run("--version")
    assert version.returncode == 0 and version.stdout.strip() == "ray-accel 0.1.0", version
    where = subprocess.run([str(python), "-c", "import ray_accel_ext; print(ray_accel_ext.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path, check=True).stdout
    assert str(env_dir) in where and str(REPO) not in where
    licenses = list(env_dir.glob("lib/python*/site-packages/ray_accel_ext-*.dist-info/licenses/LICENSE"))
    assert licenses and "Apache License" in licenses[0].read_text()
    spec = run("ray-args", "--root", str(SNAPSHOT), "--format", "json")
    assert spec.returncode == 0, spec.stderr
    assert json.loads(spec.stdout) == json.loads((SNAPSHOT / "expected.json").read_text())["ray"]


if sys.platform != "linux":  # pragma: no cover
    pytestmark = pytest.mark.skip("the image is Linux")
