#!/usr/bin/env bash
# Installs Debian packages with apt-get without starting their services: the project runs its own
# (PostgreSQL, Prometheus and Docker are started by the test tooling on its own ports and paths).
#   scripts/apt-install.sh [--disable UNIT]... PACKAGE...
# Needs root and apt-get; says which packages are missing otherwise. Each --disable UNIT is also
# kept from starting at boot where systemd runs. Waits for another apt-get (a second checkout's
# set-up) to release the lock.
set -euo pipefail
units=()
while [ "${1:-}" = --disable ]; do units+=("$2"); shift 2; done
if [ $# -eq 0 ]; then exit 0; fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "missing system packages: $* — install them with your package manager" >&2
  exit 1
fi
echo "installing system packages: $*" >&2
export DEBIAN_FRONTEND=noninteractive
# invoke-rc.d and deb-systemd-invoke ask policy-rc.d; exit code 101 means "do not start".
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get -o DPkg::Lock::Timeout=600 update -qq
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "$@" >/dev/null
if [ ${#units[@]} -gt 0 ] && [ -d /run/systemd/system ]; then
  systemctl disable --now "${units[@]}" >/dev/null 2>&1 || true
fi
