#!/usr/bin/env bash
# Set up themisto-env on a fresh Debian/Ubuntu machine (as root, or with sudo available).
#
#   bash scripts/setup.sh            the package, its Python dependencies, bubblewrap
#   bash scripts/setup.sh --docker   also Docker (docker.io), a running dockerd and the kernel image
#
# Idempotent: run it again and it only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

with_docker=0
for arg in "$@"; do
  case "$arg" in
    --docker) with_docker=1 ;;
    *) echo "usage: bash scripts/setup.sh [--docker]" >&2; exit 2 ;;
  esac
done

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive

need=()
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v chromium >/dev/null || need+=(chromium)
if [ "${#need[@]}" -gt 0 ]; then
  echo "==> installing Debian packages: ${need[*]}"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

echo "==> installing themisto-env and its Python dependencies"
python3 -m pip install -q --disable-pip-version-check torch==2.13.0  # CPU wheel first: an unpinned torch pulls CUDA
python3 -m pip install -q --disable-pip-version-check -e '.[dev,rl,ray]'

if [ "$with_docker" -eq 1 ]; then
  echo "==> Docker engine and kernel image"
  bash .ci/setup-docker.sh
fi
echo "==> ready"
