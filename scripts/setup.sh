#!/usr/bin/env bash
# Set up themisto-env on a fresh Debian/Ubuntu machine (as root, or with sudo available).
#
#   bash scripts/setup.sh            the package and its Python dependencies in a venv (.venv), bubblewrap
#   bash scripts/setup.sh --docker   also Docker (docker.io), a running dockerd and the kernel image
#   bash scripts/setup.sh --system   install into the current python3 instead of a venv
#
# The venv is made with uv where uv is installed (`uv venv --seed`), else with `python3 -m venv`; pip installs
# into it with the versions CI tests (requirements/lock.txt, `pip install -c`; scripts/lock.sh refreshes
# it). Then `source .venv/bin/activate` puts its `themisto`, `python3` and `pytest` first on PATH.
# Environment: THEMISTO_VENV (default .venv in the checkout), PYTHON (the Python of the venv, default python3).
#
# Idempotent: run it again and it only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

with_docker=0
system=0
for arg in "$@"; do
  case "$arg" in
    --docker) with_docker=1 ;;
    --system) system=1 ;;
    *) echo "usage: bash scripts/setup.sh [--docker] [--system]" >&2; exit 2 ;;
  esac
done

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
base="${PYTHON:-python3}"

need=()
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v chromium >/dev/null || need+=(chromium)
[ "$system" -eq 1 ] || "$base" -c "import ensurepip, venv" 2>/dev/null || command -v uv >/dev/null || need+=(python3-venv)
if [ "${#need[@]}" -gt 0 ]; then
  echo "==> installing Debian packages: ${need[*]}"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if [ "$system" -eq 1 ]; then
  python="$(command -v "$base")"
else
  venv="${THEMISTO_VENV:-$PWD/.venv}"
  if [ ! -x "$venv/bin/python" ]; then
    if command -v uv >/dev/null; then
      echo "==> making a venv with uv at $venv"
      uv venv -q --seed --python "$("$base" -c 'import sys; print(sys.executable)')" "$venv"
    else
      echo "==> making a venv at $venv"
      "$base" -m venv "$venv"
    fi
  fi
  python="$venv/bin/python"
fi
version="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
[ "$version" = "3.11" ] || echo "note: requirements/lock.txt was written for Python 3.11; this is $version" >&2

echo "==> installing themisto-env and its Python dependencies (requirements/lock.txt) into $python"
# pip, never uv, installs: the lock pins torch to the CPU build's version, found where pip is told to look
# (on a machine without a CPU wheel at hand: install torch==2.13.0 from PyTorch's CPU wheel index first)
"$python" -m pip install -q --disable-pip-version-check -c requirements/lock.txt -e '.[dev,rl,ray,docs,trace]'

if [ "$with_docker" -eq 1 ]; then
  echo "==> Docker engine and kernel image"
  THEMISTO_PYTHON="$python" bash .ci/setup-docker.sh
fi
if [ "$system" -eq 1 ]; then
  echo "==> ready: themisto and the tests use $python"
else
  echo "==> ready: source ${venv#"$PWD"/}/bin/activate (then themisto, python3 and pytest are the venv's)"
fi
