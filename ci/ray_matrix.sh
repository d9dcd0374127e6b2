#!/usr/bin/env bash
# The Ray-integration tests listed in ci/ray-oldest-tests.txt (the places where Ray releases differ),
# and the feature table check, on the oldest supported Ray release, in a second project-local
# virtualenv (.venv-ray-oldest). ci/test.sh makes that virtualenv (--setup-only: install, run nothing)
# while the whole suite runs on the newest release in .venv, and runs this afterwards. Extra
# arguments go to pytest.
#   RAY_OLDEST=2.55.1 bash ci/ray_matrix.sh     # default: the newest patch of compat.MIN_RAY_VERSION
#   bash ci/ray_matrix.sh --setup-only           # create or update .venv-ray-oldest, run nothing
set -euo pipefail
unset PYTHONDONTWRITEBYTECODE  # as in ci/env.sh: this virtualenv is installed without bytecode
setup_only=0
if [ "${1:-}" = --setup-only ]; then setup_only=1; shift; fi
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
oldest="${RAY_OLDEST:-$("$PY" -c 'import ast, pathlib, re
text = pathlib.Path("ray_accel_ext/compat.py").read_text()
major, minor = ast.literal_eval(re.search(r"^MIN_RAY_VERSION[^=]*= (\(.*\))$", text, re.M).group(1))
print(f"{major}.{minor}.*")')}"
VENV=.venv-ray-oldest
STAMP="$VENV/.installed"
want="$(cat pyproject.toml ci/ray-oldest-constraints.txt | sha256sum | cut -c1-16)-ray-$oldest"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$want" ]; then
  echo "== installing ray-accel-ext[test-base] with ray==$oldest into $VENV" >&2
  "$VENV/bin/python" -m pip install --disable-pip-version-check -q --upgrade pip >&2
  # --no-compile: the listed tests import a fraction of what is installed, and Python writes the
  # bytecode of what they do import (above); pip's byte-compiling of every module of Ray and its
  # dependencies was CPU taken from the main pytest this set-up runs beside (ci/test.sh).
  "$VENV/bin/python" -m pip install --disable-pip-version-check -q --no-compile -e ".[test-base]" \
    "ray[default,serve]==$oldest" -c ci/ray-oldest-constraints.txt >&2
  if [ -d tests/downstream/ray_accel_ext_acme ]; then  # collected with tests/, as in ci/test.sh
    "$VENV/bin/python" -m pip install --disable-pip-version-check -q -e tests/downstream/ray_accel_ext_acme >&2
  fi
  echo "$want" > "$STAMP"
fi
[ "$setup_only" = 1 ] && exit 0
version="$("$VENV/bin/python" -c 'import ray; print(ray.__version__)')"
echo "== Ray-integration tests on Ray $version (oldest supported)"
mkdir -p artifacts
mapfile -t selected < <(grep -v '^#' ci/ray-oldest-tests.txt | awk 'NF {print $1}')
"$VENV/bin/python" -m pytest "${selected[@]}" -m ray -q -p no:cacheprovider --durations=10 \
  --junitxml="artifacts/junit-ray-$version.xml" "$@"
# The probes of Ray's shape (features and private interfaces), without starting a cluster.
"$VENV/bin/python" -m pytest tests/unit/test_compat.py tests/unit/test_device_isolation.py -q -p no:cacheprovider
