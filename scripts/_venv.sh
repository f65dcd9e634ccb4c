# Sourced by demo.sh / test.sh: create .venv once and install pycann (editable) with the given extras.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
if ! command -v "$PY" >/dev/null 2>&1 || ! "$PY" -c 'import sys' >/dev/null 2>&1; then
  echo "PYTHON=$PY: no such Python interpreter. Set PYTHON to a Python >= 3.10 (e.g. PYTHON=python3.10)." >&2
  exit 2
fi
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null; then
  echo "pycann needs Python >= 3.10; '$PY' is $("$PY" --version 2>&1). Set PYTHON=python3.10 (or newer)." >&2
  exit 2
fi
# a .venv left by an older Python (or by another interpreter than $PYTHON asks for) is rebuilt
if [ -x .venv/bin/python ] && { ! .venv/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
    || { [ -n "${PYTHON:-}" ] && [ "$(.venv/bin/python -c 'import sys; print(sys.version_info[:2])')" != \
         "$("$PY" -c 'import sys; print(sys.version_info[:2])')" ]; }; }; then
  echo "rebuilding .venv for $("$PY" --version 2>&1)" >&2
  rm -rf .venv
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate
python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
python -m pip install -q -e ".[$1]"
# The kernels extra's Winograd convs need oneDNN v2's library beside v3 (same pip name, so it is
# unpacked into ~/.cache/pycann/onednn2 instead); optional: without it pycann uses direct convs.
case ",$1," in
  *,kernels,*) python scripts/fetch_onednn2.py >/dev/null || true ;;
esac
# torchvision's wheel links CUDA torch's libraries; beside the +cpu torch its C++ ops cannot load
# and `import torchvision` would fail: a .pth hook defines the two op schemas its import needs
# (pycann/torch_vision_hook.py; no-op when torchvision's own ops load).
case ",$1," in
  *,models,*) python -m pycann.torch_vision_hook --install >/dev/null || true ;;
esac
