#!/usr/bin/env bash
# Every test: unit, snapshot goldens, real-Ray integration, conformance suite (in-tree backends and
# the separately packaged Acme backend of the README) on the newest Ray; then the package as users install it
# (ci/package.sh) and the Ray-integration tests on the oldest supported Ray (ci/ray_matrix.sh).
# Installs what it needs into .venv (and .venv-ray-oldest); as root with apt-get it also installs
# the system packages the browser, udev and metrics tests use (prometheus: promtool). Extra
# arguments go to the main pytest run.
. "$(dirname "$0")/env.sh" test
set -euo pipefail

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  missing=()
  for pkg in chromium umockdev gir1.2-umockdev-1.0 python3-gi prometheus; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "== apt-get install ${missing[*]}"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}") >/dev/null \
      || echo "warning: could not install ${missing[*]}; the tests that need them will say so"
  fi
fi

if [ -d tests/downstream/ray_accel_ext_acme ]; then
  python -m pip install --disable-pip-version-check -q -e tests/downstream/ray_accel_ext_acme
fi

mkdir -p artifacts
echo "== ruff"
python -m ruff check .
echo "== pytest (Ray $(python -c 'import ray; print(ray.__version__)'))"
python -m pytest tests -q -p no:cacheprovider --durations=15 --junitxml=artifacts/junit-tests.xml "$@"
# The reliability table from this run (tests/test_reliability_*.py, tests/reliability/test_soak.py): fails on
# any hang, crashed node start or invalid label; docs/reliability.md is the committed copy.
python ci/fault_report.py --check --out artifacts/reliability.md
if [ -x ci/conformance.sh ]; then
  echo "== conformance suite"
  bash ci/conformance.sh
fi
echo "== package: build, check, install into a fresh virtualenv, run the demo from it"
bash ci/package.sh
echo "== Ray-version matrix: the oldest supported Ray"
bash ci/ray_matrix.sh
