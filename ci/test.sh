#!/usr/bin/env bash
# Every test: unit, snapshot goldens, real-Ray integration, conformance suite (in-tree backends and
# the separately packaged Acme backend of the README). Installs what it needs into .venv; as root with apt-get it also
# installs the system packages the browser and udev tests use. Extra arguments go to pytest.
. "$(dirname "$0")/env.sh" test
set -euo pipefail

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  missing=()
  for pkg in chromium umockdev gir1.2-umockdev-1.0 python3-gi; do
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
echo "== pytest"
python -m pytest tests -q -p no:cacheprovider --durations=15 --junitxml=artifacts/junit-tests.xml "$@"
# The reliability table from this run (tests/test_reliability_*.py, tests/reliability/test_soak.py): fails on
# any hang, crashed node start or invalid label; docs/reliability.md is the committed copy.
python ci/fault_report.py --check --out artifacts/reliability.md
if [ -x ci/conformance.sh ]; then
  echo "== conformance suite"
  bash ci/conformance.sh
fi
