#!/usr/bin/env bash
# A Docker daemon of the project's own, for building and running images, beside (never instead
# of) any Docker the machine already runs.
#
#   e2e/cluster/dockerd.sh up      # install Docker if missing, start the daemon if it does not
#                                  # answer, print its address (use it as DOCKER_HOST)
#   e2e/cluster/dockerd.sh down    # stop it, leaving no process behind
#   e2e/cluster/dockerd.sh host    # print the address only
#
# Everything lives in one state directory (default .cluster/docker, or VIGIL_DOCKER_STATE):
# docker.sock, daemon.json, dockerd.pid, dockerd.log, run/ (the daemons' runtime state), the
# image store (data/), and a containerd started for this daemon alone (containerd.sock,
# containerd.pid, containerd.log, containerd.toml).
# dockerd would otherwise adopt a containerd already listening at the system's default socket
# (a kubelet node's, say) and leave its own state there. The daemon makes no bridge and writes
# no iptables rule: containers and builds run with --network host or none, so two such daemons
# (two checkouts) and the machine's own networking never collide.
#
# Installing needs root and apt-get (Debian's docker.io: dockerd 20.10, containerd, runc); the
# packaged service is kept from starting, as in scripts/system-deps.sh.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
state="${VIGIL_DOCKER_STATE:-$repo/.cluster/docker}"
mkdir -p "$state"
state="$(cd "$state" && pwd)"
sock="$state/docker.sock"
address="unix://$sock"
start_timeout_s=60  # dockerd answers in ~2 s; a first start creates its image store

answers() { DOCKER_HOST="$address" docker version >/dev/null 2>&1; }

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

install_docker() {
  local missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v containerd >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  # The packages' services must not start: this script runs its own daemon.
  "$repo/scripts/apt-install.sh" --disable docker.service --disable docker.socket \
    --disable containerd.service "${missing[@]}"
}

wait_until() { # wait_until <what> <pidfile of the process that must stay up> <command...>
  local what="$1" pidfile="$2" deadline=$((SECONDS + start_timeout_s))
  shift 2
  until "$@"; do
    if ! alive "$pidfile"; then
      echo "dockerd.sh: $(basename "$pidfile" .pid) exited while waiting for $what:" >&2
      tail -n 5 "${pidfile%.pid}.log" >&2
      exit 1
    fi
    if [ $SECONDS -ge $deadline ]; then
      echo "dockerd.sh: timed out after ${start_timeout_s}s waiting for $what; see ${pidfile%.pid}.log" >&2
      exit 1
    fi
    sleep 0.2
  done
}

up() {
  if answers; then echo "$address"; return 0; fi
  install_docker
  if [ "$(id -u)" != 0 ]; then
    echo "dockerd.sh: starting dockerd needs root" >&2
    exit 1
  fi
  if ! alive "$state/containerd.pid"; then
    # Only what dockerd uses: no CRI plugin (that is a kubelet's), state and sockets in $state.
    printf 'version = 2\nroot = "%s"\nstate = "%s"\ndisabled_plugins = ["io.containerd.grpc.v1.cri"]\n[grpc]\n  address = "%s"\n' \
      "$state/data/containerd" "$state/run/containerd" "$state/containerd.sock" >"$state/containerd.toml"
    setsid containerd --config "$state/containerd.toml" >"$state/containerd.log" 2>&1 </dev/null &
    echo $! >"$state/containerd.pid"
    wait_until "containerd to listen" "$state/containerd.pid" test -S "$state/containerd.sock"
  fi
  if ! alive "$state/dockerd.pid"; then
    rm -f "$sock"
    # Its own (empty) configuration: the machine's /etc/docker/daemon.json is for its own Docker.
    echo '{}' >"$state/daemon.json"
    setsid dockerd --config-file "$state/daemon.json" \
      --host "$address" --pidfile "$state/run/dockerd.pid" \
      --data-root "$state/data" --exec-root "$state/run/docker" \
      --containerd "$state/containerd.sock" --cgroup-parent vigil-docker \
      --bridge none --iptables=false --ip-forward=false --ip-masq=false --userland-proxy=false \
      >"$state/dockerd.log" 2>&1 </dev/null &
    echo $! >"$state/dockerd.pid"
  fi
  wait_until "dockerd to answer" "$state/dockerd.pid" answers
  echo "$address"
}

stop_pid() { # stop_pid <pid>: SIGTERM, then SIGKILL after a grace period
  local pid="$1" deadline=$((SECONDS + 30))
  kill "$pid" 2>/dev/null || return 0
  while kill -0 "$pid" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.2; done
  kill -9 "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
}

# The runc shims this daemon's containerd started: they name its socket on their command line.
shims() {
  local f
  for f in /proc/[0-9]*/cmdline; do
    # (a process may end between the glob and the read: its file is gone, which is fine)
    if tr '\0' ' ' 2>/dev/null <"$f" | grep -q -- "-address $state/containerd.sock"; then
      f="${f#/proc/}"
      echo "${f%/cmdline}"
    fi
  done
}

down() {
  # dockerd stops its containers itself on SIGTERM (it waits up to their stop timeout).
  if alive "$state/dockerd.pid"; then stop_pid "$(cat "$state/dockerd.pid")"; fi
  if alive "$state/containerd.pid"; then stop_pid "$(cat "$state/containerd.pid")"; fi
  local pid
  for pid in $(shims); do stop_pid "$pid"; done
  rm -f "$state/dockerd.pid" "$state/containerd.pid"
  # What the daemon mounts and leaves behind even when it stops cleanly (the network namespace
  # it pins under run/, the image store it re-mounts onto itself), deepest first: without this,
  # deleting .cluster fails with "Device or resource busy".
  local mount
  for mount in $(awk -v s="$state/" 'index($2, s) == 1 {print $2}' /proc/mounts | sort -r); do
    umount "$mount" 2>/dev/null || umount --lazy "$mount"
  done
  if [ -n "$(shims)" ] || alive "$state/dockerd.pid" || alive "$state/containerd.pid"; then
    echo "dockerd.sh: processes still running after stop" >&2
    exit 1
  fi
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  host) echo "$address" ;;
  *) echo "usage: $0 up|down|host" >&2; exit 2 ;;
esac
