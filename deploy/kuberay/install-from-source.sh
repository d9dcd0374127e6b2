#!/usr/bin/env bash
# Build a wheel of ray_accel_ext from a source tree and install it, with extras, into a Python.
# deploy/kuberay/Dockerfile runs exactly this in the image; tests/deploy/test_image.py runs it into a
# fresh virtual environment.
#   Usage: install-from-source.sh SRC [EXTRAS] [PYTHON]
#     SRC     the repository (the image's build context)
#     EXTRAS  comma-separated extras: nvidia, gcp, aws, udev (default: none)
#     PYTHON  the interpreter to install into (default: python3)
set -euo pipefail
src="$(cd "$1" && pwd)"
extras="${2:-}"
py="${3:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# The wheel is built from a copy, so the source tree stays as it was (no build/ or egg-info/).
cp -a "$src/." "$work/src"
"$py" -m pip wheel --disable-pip-version-check --no-cache-dir --no-deps --wheel-dir "$work/dist" "$work/src"
wheel="$(ls "$work"/dist/ray_accel_ext-*.whl)"
if [ -n "$extras" ]; then
  spec="ray-accel-ext[$extras] @ file://$wheel"
else
  spec="$wheel"
fi
"$py" -m pip install --disable-pip-version-check --no-cache-dir "$spec"
# The installed package answers and its start hook imports.
"$py" -c "import ray_accel_ext, ray_accel_ext.ray_hook as h; assert callable(h.start_hook); print('ray-accel-ext', ray_accel_ext.__version__, 'installed')"
