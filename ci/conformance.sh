#!/usr/bin/env bash
# The conformance suite for every in-tree backend and the separately packaged Acme backend of the
# README (tests/downstream/ray_accel_ext_acme: pip-installed into the venv first, like a vendor's
# package, then also its own subclass-mode tests).
# Each run starts one real Ray node from a snapshot (--live-ray); two backends run at a time, and
# their tables are printed in order once all have ended. Reports are kept under
# ${ARTIFACTS:-artifacts}/conformance/: <backend>.json, <backend>.xml (JUnit), <backend>.txt (table),
# summary.txt. Exit status: 0 only when every backend passes.
# Usage: ci/conformance.sh [VENV]     (default: .venv)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
VENV="$(cd "${1:-.venv}" && pwd)" || exit 2
PY="$VENV/bin/python"
mkdir -p "${ARTIFACTS:-artifacts}/conformance"
OUT="$(cd "${ARTIFACTS:-artifacts}/conformance" && pwd)"
: > "$OUT/summary.txt"
export PATH="$VENV/bin:$PATH"

# Installed once (ci/test.sh does it before its lanes): reinstalling rewrites its metadata while the
# other lane's tests scan entry points.
if ! "$PY" -c 'import importlib.metadata as m; m.distribution("ray-accel-ext-acme")' 2>/dev/null; then
  echo "== pip install tests/downstream/ray_accel_ext_acme into $VENV"
  "$PY" -m pip install --disable-pip-version-check -q -e tests/downstream/ray_accel_ext_acme || exit 2
fi

status=0
labels=()
suite() {  # suite LABEL BACKEND SNAPSHOTS [XFAILS]: started in the background, two at a time
  local label=$1 backend=$2 snaps=$3 xfails=${4:-}
  local args=(conformance "$backend" --snapshots "$snaps" --live-ray --junit "$OUT/$label.xml" --json-report "$OUT/$label.json")
  [ -n "$xfails" ] && [ -f "$xfails" ] && args+=(--xfails "$xfails")
  while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n || true; done
  labels+=("$label")
  echo "== conformance: $label started"
  ("$PY" -m ray_accel_ext.tools.cli "${args[@]}" > "$OUT/$label.txt" 2>&1; echo $? > "$OUT/$label.rc") &
}

# In-tree backends: every entry point ray-accel-ext itself registers, with tests/data/hosts/<name>.
for name in $("$PY" -c 'from ray_accel_ext.node.registry import available_backends as a
print(" ".join(s.name for s in a() if s.dist.startswith("ray-accel-ext ")))'); do
  suite "$name" "$name" "tests/data/hosts/$name" "ci/xfails/$name.txt"
done
# The reference FakeBackend is not run here: it is not under the entry point, so its live check
# skips, and the rest is tests/conformance/test_plugin.py::test_cli_reports_checklist_as_json_and_junit
# (the same CLI run, snapshots, JSON and JUnit reports) in the main pytest run.
suite acme_npu acme_npu tests/downstream/ray_accel_ext_acme/tests/hosts tests/downstream/ray_accel_ext_acme/conformance-xfails.txt
wait
for label in "${labels[@]}"; do  # the tables, in order
  echo "== conformance: $label"
  cat "$OUT/$label.txt"
  echo "$label: $(tail -n 1 "$OUT/$label.txt")" >> "$OUT/summary.txt"
  [ "$(cat "$OUT/$label.rc" 2>/dev/null)" = 0 ] || status=1
done

echo "== downstream: ray_accel_ext_acme's own tests (suite subclasses + unit tests)"
if (cd tests/downstream/ray_accel_ext_acme && "$PY" -m pytest -q -p no:cacheprovider --junitxml "$OUT/acme_npu-own-tests.xml"); then
  echo "acme_npu-own-tests: PASS" >> "$OUT/summary.txt"
else
  echo "acme_npu-own-tests: FAIL" >> "$OUT/summary.txt"; status=1
fi

echo "== summary ($OUT/summary.txt)"
cat "$OUT/summary.txt"
exit $status
