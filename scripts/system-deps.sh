#!/usr/bin/env bash
# Installs the OS packages Vigil's tooling needs, only those missing, with apt-get.
#   openssl      — the local control plane's certificates
#   postgresql   — the history database's production backend, started by the test tooling
#   golang       — builds the control plane (skipped when a go toolchain is already on PATH)
set -euo pipefail
missing=()
command -v openssl >/dev/null || missing+=(openssl)
command -v go >/dev/null || missing+=(golang-go)
command -v python3 >/dev/null || missing+=(python3 python3-venv)
if ! command -v pg_ctl >/dev/null && ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
  missing+=(postgresql)
fi
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "missing system packages: ${missing[*]} — install them with your package manager" >&2
  exit 1
fi
echo "installing system packages: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
