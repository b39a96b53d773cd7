#!/usr/bin/env bash
# Refresh requirements/lock.txt: the exact version of every package `scripts/setup.sh` installs (the
# package's dependencies and its dev, rl, ray, docs and trace extras), as CI tests them. It installs the newest versions
# pyproject.toml allows into a new, empty venv (torch pinned first, the CPU wheel where one is found: an
# unpinned torch pulls the CUDA build) and writes what pip chose (`pip freeze`), torch as `torch==X.Y.Z`.
#
#   bash scripts/lock.sh            rewrite requirements/lock.txt (then run the tests, and commit it)
#   TORCH=2.13.0 bash scripts/lock.sh
#
# The lock is for CPython 3.11 on Linux x86_64 (what CI runs), written with Debian's Python where it is
# installed (/usr/bin/python3, 3.11.2: the oldest 3.11 of the project's venvs, the bwrap user's), so that every
# venv can install it (some packages' newest versions ask for 3.11.5 or later). pip ignores a pin for a package
# nothing asks for, and a package asked for only elsewhere (another Python, another platform) goes unpinned.
#   PYTHON=python3 bash scripts/lock.sh     with another Python
set -euo pipefail
cd "$(dirname "$0")/.."
torch="${TORCH:-2.13.0}"
extras="dev,rl,ray,docs,trace"
default_python=python3
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c "import ensurepip, venv" 2>/dev/null && default_python=/usr/bin/python3
python="${PYTHON:-$default_python}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "==> a new venv ($("$python" --version)) with the newest allowed versions of .[$extras]"
"$python" -m venv "$work/venv"
pip=("$work/venv/bin/python" -m pip install -q --disable-pip-version-check)
"${pip[@]}" "torch==$torch"
"${pip[@]}" -e ".[$extras]"
"$work/venv/bin/python" -m pip check

mkdir -p requirements
{
  echo "# The exact versions CI tests: scripts/setup.sh installs with \`pip install -c requirements/lock.txt\`."
  echo "# Written by scripts/lock.sh ($("$work/venv/bin/python" --version), $(uname -m)): do not edit by hand."
  "$work/venv/bin/python" -m pip freeze --exclude-editable | sed -E 's/^(torch==[^+]+)\+.*/\1/'
} > requirements/lock.txt.new
mv requirements/lock.txt.new requirements/lock.txt
echo "==> requirements/lock.txt: $(grep -vc '^#' requirements/lock.txt) pins"
