#!/usr/bin/env bash
# The bwrap backend's tests, for real. bwrap refuses to start as root (by design: the kernel would read
# root-only files), and CI runs as root, where those tests are skipped. As root, this script makes an
# unprivileged user (themisto-bwrap), gives it a venv of Debian's Python (/usr/bin/python3, python3-venv)
# holding a copy of this working tree installed with pip at the locked versions (`pip install -c
# requirements/lock.txt -e` in that venv only: the checkout's .venv and the system's install are untouched),
# and runs every test marked `bwrap` as that user, with no skip (a skip fails): among them
# tests/sandbox/test_bwrap_copies.py, the attacks of one forked copy of model-written code on its siblings,
# and tests/scoring/test_hostile_predictions.py's `bwrap-forked` cases, every hostile prediction scored on
# bwrap's forked copies (`-k hostile` runs both).
#
#   bash scripts/setup-bwrap-user.sh                 set up (idempotent), then run the bwrap tests
#   bash scripts/setup-bwrap-user.sh --setup-only    only set up
#   bash scripts/setup-bwrap-user.sh -k store        extra arguments go to pytest
#
# The conformance table as that user (what `themisto sandbox check --backend bwrap` prints):
#   runuser -u themisto-bwrap -- env -i HOME=/home/themisto-bwrap PATH=/usr/bin:/bin \
#     /opt/themisto-bwrap/venv/bin/themisto sandbox check --backend bwrap
# Not root? Then run the tests directly: python3 -m pytest -m bwrap tests
set -euo pipefail
cd "$(dirname "$0")/.."

user="${THEMISTO_BWRAP_USER:-themisto-bwrap}"
root="${THEMISTO_BWRAP_ROOT:-/opt/themisto-bwrap}"
setup_only=0
if [ "${1:-}" = "--setup-only" ]; then
  setup_only=1
  shift
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "error: run as root (it makes a user); as an unprivileged user run: python3 -m pytest -m bwrap tests" >&2
  exit 2
fi
export DEBIAN_FRONTEND=noninteractive

need=()
command -v bwrap >/dev/null || need+=(bubblewrap)
/usr/bin/python3 -c "import ensurepip, venv" 2>/dev/null || need+=(python3-venv)
command -v git >/dev/null || need+=(git)
if [ "${#need[@]}" -gt 0 ]; then
  echo "==> installing Debian packages: ${need[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

if ! id "$user" >/dev/null 2>&1; then
  echo "==> creating the unprivileged user $user"
  useradd --create-home --shell /bin/bash "$user"
fi
home="$(getent passwd "$user" | cut -d: -f6)"

# A copy of the working tree (tracked and new files, not ignored ones) the user can read; replaced whole.
echo "==> copying this working tree to $root/src"
mkdir -p "$root"
rm -rf "$root/src.new"
mkdir "$root/src.new"
git ls-files -z --cached --others --exclude-standard \
  | tar --null --ignore-failed-read --files-from - -cf - 2>/dev/null | tar -xf - -C "$root/src.new"
rm -rf "$root/src"
mv "$root/src.new" "$root/src"

if [ ! -x "$root/venv/bin/python" ]; then
  echo "==> making a venv of Debian's Python at $root/venv"
  /usr/bin/python3 -m venv "$root/venv"
fi
echo "==> installing themisto-env (with its dev extra) into that venv, at the locked versions"
"$root/venv/bin/python" -m pip install -q --disable-pip-version-check -c "$root/src/requirements/lock.txt" \
  -e "$root/src[dev]"
chmod -R a+rX "$root"

if [ "$setup_only" -eq 1 ]; then
  echo "==> ready: $user, $root/venv"
  exit 0
fi
echo "==> the bwrap tests, as $user"
cd "$root/src"
exec runuser -u "$user" -- env -i HOME="$home" LANG=C.UTF-8 PATH="$root/venv/bin:/usr/bin:/bin" \
  PYTHONDONTWRITEBYTECODE=1 THEMISTO_REQUIRE_BACKENDS=bwrap \
  "$root/venv/bin/python" -m pytest -p no:cacheprovider -m bwrap -ra tests "$@"
