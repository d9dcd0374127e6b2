#!/usr/bin/env bash
# Every test: unit, snapshot goldens, real-Ray integration, conformance suite (in-tree backends and
# the separately packaged Acme backend of the README) on the newest Ray; then the package as users install it
# (ci/package.sh) and the Ray-integration tests on the oldest supported Ray (ci/ray_matrix.sh).
# Installs what it needs into .venv (and .venv-ray-oldest); as root with apt-get it also installs
# the system packages the browser, udev and metrics tests use (prometheus: promtool). Extra
# arguments go to the main pytest run.
. "$(dirname "$0")/env.sh" test
set -euo pipefail
say() {  # say TEXT: a section line with the time since the test command started (bash's SECONDS)
  printf '== [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"
}

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
# Two set-up legs that only install (no Ray started) run during the main pytest, at low priority:
# the oldest-Ray virtualenv and the package (build, check, install into a fresh virtualenv). Their
# output goes to artifacts/logs/ and is printed when they are waited for; Ray-starting legs run one
# at a time.
pkg="$(mktemp -d)"
trap 'rm -rf "$pkg"' EXIT
nice -n 10 bash ci/ray_matrix.sh --setup-only >artifacts/logs/ray-oldest-setup.log 2>&1 &
oldest_setup=$!
nice -n 10 bash ci/package.sh build "$pkg" >artifacts/logs/package-build.log 2>&1 &
package_build=$!

leg() {  # leg NAME COMMAND...: run one leg, remember it if it fails
  local name=$1; shift
  "$@" || { echo "== FAILED: $name (exit $?)"; failed+=("$name"); }
}
background() {  # background NAME PID LOG: wait for a set-up leg, print its log
  local name=$1 pid=$2 log=$3 rc=0
  wait "$pid" || rc=$?
  say "$name (ran during the main pytest; $log)"
  cat "$log"
  [ "$rc" = 0 ] || { echo "== FAILED: $name (exit $rc)"; failed+=("$name"); }
  return "$rc"
}

say "ruff"
leg ruff python -m ruff check .
lane() {  # lane NAME PYTEST-ARGS...: one pytest lane; "no test selected" (exit 5) is fine when the
          # extra arguments narrowed the run to the other lane
  local name=$1 rc=0; shift
  python -m pytest tests -q -p no:cacheprovider --junitxml="artifacts/junit-$name.xml" "$@" || rc=$?
  [ "$rc" = 5 ] && [ "$extra" -gt 0 ] && rc=0
  return "$rc"
}
extra=$#
ray_version="$(python -c 'import ray; print(ray.__version__)')"
# Modules that start no Ray, two at a time (pytest-xdist; a module stays in one process, so its
# fixtures and artifacts/reliability/<module>.json are one process's); then the modules that start
# Ray, one at a time (tests/conftest.py --lane).
say "pytest, modules that start no Ray, two processes (Ray $ray_version)"
leg "pytest (no Ray)" lane rest --lane rest -n 2 --dist loadfile --durations=10 "$@"
say "pytest, modules that start Ray, one at a time (Ray $ray_version)"
leg "pytest (Ray)" lane ray --lane ray --durations=15 "$@"
# The reliability table from this run (tests/test_reliability_*.py, tests/reliability/test_soak.py): fails on
# any hang, crashed node start or invalid label; docs/reliability.md is the committed copy.
leg fault_report python ci/fault_report.py --check --out artifacts/reliability.md
if [ -x ci/conformance.sh ]; then
  say "conformance suite"
  leg conformance bash ci/conformance.sh
fi
say "package: build, check, install into a fresh virtualenv, run the demo from it"
if background "package build" "$package_build" artifacts/logs/package-build.log; then
  leg "package demo" bash ci/package.sh demo "$pkg"
fi
say "Ray-version matrix: the oldest supported Ray"
if background "oldest-Ray set-up" "$oldest_setup" artifacts/logs/ray-oldest-setup.log; then
  leg "Ray-version matrix" bash ci/ray_matrix.sh
fi
if [ ${#failed[@]} -gt 0 ]; then
  say "failed: ${failed[*]}"
  exit 1
fi
say "all legs passed"
