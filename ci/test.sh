#!/usr/bin/env bash
# Every test: unit, snapshot goldens, real-Ray integration, conformance suite (in-tree backends and
# the separately packaged Acme backend of the README) on the newest Ray; the package as users install it
# (ci/package.sh) and the Ray-integration tests on the oldest supported Ray (ci/ray_matrix.sh).
# Installs what it needs into .venv (and .venv-ray-oldest); as root with apt-get it also installs
# the system packages the browser, udev and metrics tests use (prometheus: promtool). Extra
# arguments go to both pytest runs.
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

mkdir -p artifacts/logs
failed=()
# Two lanes side by side (2 cores: one mostly waits on Ray while the other computes):
#  - in the foreground, the modules that start Ray (pytest --lane ray, tests/conftest.py);
#  - in the background, every other module (--lane rest), then the conformance suite, the package
#    demo and the oldest Ray's integration tests. Its set-up legs (the oldest-Ray virtualenv; the
#    package build, check and install) run at low priority during the conformance suite.
# Each background leg writes artifacts/logs/<leg>.log and one status line; the logs are printed in
# order once both lanes are done.
status="$(mktemp)"
pkg="$(mktemp -d)"
trap 'rm -rf "$pkg" "$status"' EXIT

logged() {  # logged NAME LOG COMMAND...: run one background leg into LOG, note its exit status (read at the end)
  local name=$1 log=$2 rc=0; shift 2
  "$@" >"$log" 2>&1 || rc=$?
  echo "$rc $name|$log" >>"$status"
  if [ "$rc" = 0 ]; then echo "== $name: passed ($log)"; else echo "== $name: FAILED, exit $rc ($log)"; fi
}

background_lane() {
  logged "pytest, the modules that start no Ray" artifacts/logs/pytest-rest.log \
    python -m pytest tests --lane rest -q -p no:cacheprovider --durations=10 --junitxml=artifacts/junit-rest.xml "$@"
  # Installs only, at low priority, during the conformance suite (not earlier: the Ray lane starts
  # its largest simulated clusters in its first minutes).
  low_priority bash ci/ray_matrix.sh --setup-only >artifacts/logs/ray-oldest-setup.log 2>&1 &
  local oldest_setup=$!
  low_priority bash ci/package.sh build "$pkg" >artifacts/logs/package-build.log 2>&1 &
  local package_build=$!
  if [ -x ci/conformance.sh ]; then
    logged "conformance suite" artifacts/logs/conformance.log bash ci/conformance.sh
  fi
  local rc=0
  wait "$package_build" || rc=$?
  echo "$rc package build|artifacts/logs/package-build.log" >>"$status"
  [ "$rc" = 0 ] && logged "package demo (the installed wheel)" artifacts/logs/package-demo.log bash ci/package.sh demo "$pkg"
  rc=0
  wait "$oldest_setup" || rc=$?
  echo "$rc oldest-Ray set-up|artifacts/logs/ray-oldest-setup.log" >>"$status"
  [ "$rc" = 0 ] && logged "Ray-version matrix: the oldest supported Ray" artifacts/logs/ray-oldest.log bash ci/ray_matrix.sh
  return 0
}

low_priority() {  # low_priority COMMAND...: nice, and idle I/O class where ionice exists
  if command -v ionice >/dev/null 2>&1; then nice -n 10 ionice -c 3 "$@"; else nice -n 10 "$@"; fi
}

leg() {  # leg NAME COMMAND...: run one leg, remember it if it fails
  local name=$1; shift
  "$@" || { echo "== FAILED: $name (exit $?)"; failed+=("$name"); }
}

echo "== ruff"
leg ruff python -m ruff check .
background_lane "$@" &
lane=$!
echo "== pytest (Ray $(python -c 'import ray; print(ray.__version__)')): the modules that start Ray; alongside, in the" \
     "background: the other modules, the conformance suite, the package, the oldest Ray (artifacts/logs/)"
leg pytest python -m pytest tests --lane ray -q -p no:cacheprovider --durations=15 --junitxml=artifacts/junit-tests.xml "$@"
echo "== waiting for the background lane"
wait "$lane" || true
while IFS= read -r line; do
  rc=${line%% *}; rest=${line#* }; name=${rest%|*}; log=${rest#*|}
  echo "== $name ($log)"
  cat "$log"
  [ "$rc" = 0 ] || { echo "== FAILED: $name (exit $rc)"; failed+=("$name"); }
done <"$status"
# The reliability table from this run (tests/reliability/test_*.py, from both lanes): fails on any
# hang, crashed node start or invalid label; docs/reliability.md is the committed copy.
leg fault_report python ci/fault_report.py --check --out artifacts/reliability.md
if [ ${#failed[@]} -gt 0 ]; then
  echo "== failed: ${failed[*]}"
  exit 1
fi
echo "== all legs passed"
