#!/usr/bin/env bash
# Docker for themisto-env on a Debian machine, as root (or with sudo): the engine, a running dockerd,
# and the kernel image, built with no registry (debootstrap + docker import; see sandbox/image/__init__.py).
#
#   bash .ci/setup-docker.sh
#
# Idempotent: installs only what is missing, starts dockerd only if `docker info` fails, and builds the
# image only if the one for the installed package set is missing. Expects themisto-env pip-installed in
# THEMISTO_PYTHON (default python3; scripts/setup.sh passes its venv's).
# Environment: DOCKERD_LOG (default /var/log/dockerd.log), DOCKERD_WAIT_S (default 60).
set -euo pipefail

started=$(date +%s)
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
log=${DOCKERD_LOG:-/var/log/dockerd.log}
wait_s=${DOCKERD_WAIT_S:-60}

need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
if [ "${#need[@]}" -gt 0 ]; then
  echo "==> installing ${need[*]}"
  $SUDO apt-get update -qq
  # With docker.io's recommends (cgroupfs-mount, apparmor, ...): the set this script was tested with.
  $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

if docker info >/dev/null 2>&1; then
  echo "==> Docker engine already running"
else
  echo "==> starting dockerd (log: $log)"
  # dockerd needs the cgroup controllers mounted (v2: cgroup.controllers; v1: one folder per controller).
  if [ ! -e /sys/fs/cgroup/cgroup.controllers ] && [ ! -d /sys/fs/cgroup/memory ] \
     && command -v cgroupfs-mount >/dev/null; then
    $SUDO cgroupfs-mount
  fi
  # A service manager may run here (a normal machine); else start it by hand (containers, CI).
  if ! { command -v systemctl >/dev/null && [ -d /run/systemd/system ] && $SUDO systemctl start docker; }; then
    $SUDO sh -c "nohup dockerd >>'$log' 2>&1 &"
  fi
  deadline=$(( $(date +%s) + wait_s ))
  until docker info >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      echo "dockerd did not answer within ${wait_s} s; last lines of $log:" >&2
      tail -n 20 "$log" >&2 || true
      exit 1
    fi
    sleep 0.5
  done
  echo "==> dockerd ready after $(( $(date +%s) - started )) s"
fi

echo "==> kernel image"
"${THEMISTO_PYTHON:-python3}" -m themisto_env.sandbox.image build

echo "==> setup-docker took $(( $(date +%s) - started )) s"
