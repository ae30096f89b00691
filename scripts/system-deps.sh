#!/usr/bin/env bash
# Installs the OS packages Vigil's tooling needs, only those missing, with apt-get.
#   openssl      — the local control plane's certificates
#   postgresql   — the history database's production backend, started by the test tooling
#   golang       — builds the control plane (skipped when a go toolchain is already on PATH)
#   runc         — the OCI runtime containerd starts containers with, on the real node
#                  (`make cluster-up NODE=kubelet` and the kubelet tests)
#   busybox-static — the one static binary the kubelet node's job and sandbox images hold
#                  (e2e/cluster/images.py writes them; no registry is needed)
#   chromium     — Debian's headless browser the console's browser tests drive through Playwright
#                  (tests/integration/test_console_browser.py); Playwright never downloads one
#   prometheus   — /usr/bin/prometheus and /usr/bin/promtool for the alert tests. The tests start
#                  their own server on a free loopback port; the packaged service is never used, and
#                  its postinst is kept from starting it (policy-rc.d, then the unit is disabled).
set -euo pipefail
missing=()
command -v openssl >/dev/null || missing+=(openssl)
command -v go >/dev/null || missing+=(golang-go)
command -v python3 >/dev/null || missing+=(python3 python3-venv)
if ! command -v pg_ctl >/dev/null && ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
  missing+=(postgresql)
fi
command -v promtool >/dev/null || missing+=(prometheus)
command -v runc >/dev/null || missing+=(runc)
command -v chromium >/dev/null || missing+=(chromium)
dpkg -s busybox-static >/dev/null 2>&1 || missing+=(busybox-static)
# Packages with a service (postgresql, prometheus) must not start it: the tests run their own.
exec "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh" --disable prometheus.service "${missing[@]}"
