# Sourced by ci/demo.sh and ci/test.sh: make a project-local virtualenv (.venv) with what the
# given extras need, once; later runs reuse it while pyproject.toml is unchanged.
# Usage: . ci/env.sh EXTRAS   (e.g. "ray" or "test")
set -euo pipefail
# Bytecode is written (into the clone and the virtualenvs, all git-ignored) even where the
# environment says not to: otherwise every pytest collection rewrites every test module's asserts
# again, and every `ray start`, worker and subprocess compiles what it imports from source (the
# side virtualenvs are installed with pip --no-compile: ci/ray_matrix.sh, ci/package.sh).
unset PYTHONDONTWRITEBYTECODE
cd "$(dirname "${BASH_SOURCE[0]}")/.."
EXTRAS="${1:-ray}"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
VENV=.venv
STAMP="$VENV/.installed-$EXTRAS"
want="$(sha256sum pyproject.toml | cut -c1-16)-$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
if [ ! -x "$VENV/bin/python" ]; then
  echo "== creating $VENV with $($PY --version)" >&2
  "$PY" -m venv "$VENV"
fi
if [ "$(cat "$STAMP" 2>/dev/null || true)" != "$want" ]; then
  echo "== installing ray-accel-ext[$EXTRAS] into $VENV (first run downloads Ray, about 1-2 minutes)" >&2
  # Everything the set-up prints goes to stderr: stdout stays the command's own output (JSON).
  "$VENV/bin/python" -m pip install --disable-pip-version-check -q --upgrade pip >&2
  "$VENV/bin/python" -m pip install --disable-pip-version-check -q -e ".[$EXTRAS]" >&2
  echo "$want" > "$STAMP"
fi
export PATH="$PWD/$VENV/bin:$PATH"
