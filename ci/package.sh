#!/usr/bin/env bash
# The package as users get it: build the sdist and the wheel (python -m build: the wheel is built
# from the sdist), check them (twine check --strict; LICENSE in the wheel; no tests in the sdist),
# install the wheel into a fresh virtualenv outside the source tree, and run the main job (the
# demo, ci/demo.sh's `ray-accel demo`) from it. Uses .venv (ci/env.sh test) for build and twine.
#   bash ci/package.sh               # both steps, in a temporary folder
#   bash ci/package.sh build DIR     # build, check and install into DIR (ci/test.sh: during the main pytest)
#   bash ci/package.sh demo DIR      # the demo from DIR's virtualenv (starts Ray: after the Ray legs)
. "$(dirname "$0")/env.sh" test
set -euo pipefail
step="${1:-all}"
if [ "$step" = all ]; then
  out="$(mktemp -d)"
  trap 'rm -rf "$out"' EXIT
else
  out="$(mkdir -p "${2:?usage: ci/package.sh build|demo DIR}" && cd "$2" && pwd)"
fi

build() {
  echo "== python -m build"
  rm -rf "$out/dist"
  python -m build --outdir "$out/dist" . >"$out/build.log" 2>&1 || { cat "$out/build.log"; exit 1; }
  wheel="$(ls "$out"/dist/ray_accel_ext-*.whl)"
  sdist="$(ls "$out"/dist/ray_accel_ext-*.tar.gz)"
  echo "== twine check"
  python -m twine check --strict "$wheel" "$sdist"
  python - "$wheel" "$sdist" <<'PY'
import sys, tarfile, zipfile
wheel, sdist = sys.argv[1:]
names = zipfile.ZipFile(wheel).namelist()
assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), "LICENSE missing from the wheel"
# Device isolation in Ray's workers (docs/vendors.md): the .pth file and the module it imports, at the top.
assert {"ray_accel_ext_devices.pth", "_ray_accel_ext_devices.py"} <= set(names), "device isolation files missing"
members = tarfile.open(sdist).getnames()
assert not [m for m in members if "/tests/" in m], "the sdist ships tests it cannot run"
assert any(m.endswith("/LICENSE") for m in members), "LICENSE missing from the sdist"
print(f"wheel: {len(names)} files, LICENSE included; sdist: {len(members)} members, no tests")
PY
  echo "== installing the wheel into a fresh virtualenv"
  rm -rf "$out/venv"
  "$PY" -m venv "$out/venv"
  # --no-compile: the demo imports a fraction of Ray, and Python writes the bytecode of what it
  # imports (ci/env.sh), instead of pip byte-compiling all of Ray during the main pytest.
  "$out/venv/bin/python" -m pip install --disable-pip-version-check -q --no-compile "ray-accel-ext[ray] @ file://$wheel"
}

demo() {
  cd "$out"  # outside the source tree: only the installed package can be imported
  "$out/venv/bin/python" -c "import ray_accel_ext, sys; assert ray_accel_ext.__file__.startswith('$out/venv'), ray_accel_ext.__file__"
  "$out/venv/bin/ray-accel" --version
  echo "== main job from the installed wheel: ray-accel demo"
  "$out/venv/bin/ray-accel" demo --format json >"$out/demo.json"
  "$out/venv/bin/python" - "$out/demo.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
nodes, placements = report["nodes"], report["placements"]
assert len(nodes) >= 5 and all(n["labels"].get("rayaccel.io/discovery") == "ok" for n in nodes), nodes
families = {r for n in nodes for r in ("GPU", "TPU", "neuron_cores") if n["resources"].get(r)}
assert families == {"GPU", "TPU", "neuron_cores"}, families
assert len(placements) >= 3 and all(p["node"] for p in placements), placements
print(f"demo: {len(nodes)} nodes, {len(placements)} placements by label, in {report['elapsed_s']}s")
PY
}

case "$step" in
  all) build; demo ;;
  build) build ;;
  demo) demo ;;
  *) echo "usage: ci/package.sh [build DIR | demo DIR]" >&2; exit 2 ;;
esac
