#!/usr/bin/env bash
# Builds the local control plane binaries from the Go module proxy into a cache
# outside the repository, skipping any binary that is already there.
#
#   e2e/cluster/build.sh            # build what is missing, print the bin dir
#   e2e/cluster/build.sh node       # the same for the real node: kubelet, containerd 2
#                                   # (containerd, ctr, containerd-shim-runc-v2), the CNI
#                                   # plugins and crictl; prints that bin dir
#
# The cache key is the set of pinned versions, so bumping a version in a go.mod
# builds into a fresh directory and never mixes binaries of two releases. The node
# binaries have a directory of their own, so adding them left the control plane's
# cache as it was. runc is not built: it needs cgo and libseccomp, and Debian's
# package (`apt-get install runc`, see scripts/system-deps.sh) serves.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The pinned version of module $1 in $2/go.mod (a `require` line or a line of a require block).
ver() { awk -v m="$1" '($1 == m && $2 ~ /^v/) {print $2} ($1 == "require" && $2 == m) {print $3}' "$here/$2/go.mod" | head -n 1; }
k8s="$(ver k8s.io/kubernetes kube)"
etcd="$(ver go.etcd.io/etcd/server/v3 etcd)"
helm="$(ver helm.sh/helm/v3 helm)"
containerd="$(ver github.com/containerd/containerd/v2 containerd)"
cni="$(ver github.com/containernetworking/plugins cni)"
crictl="$(ver sigs.k8s.io/cri-tools crictl)"
if [ -z "$k8s" ] || [ -z "$etcd" ] || [ -z "$helm" ] || [ -z "$containerd" ] || [ -z "$cni" ] || [ -z "$crictl" ]; then
  echo "build.sh: could not read the pinned versions from the go.mod files" >&2
  exit 1
fi
cache="${VIGIL_CACHE:-$HOME/.cache/vigil}"
what="${1:-control-plane}"
case "$what" in
  control-plane) bin="$cache/k8s-$k8s-etcd-$etcd-helm-$helm/bin" ;;
  node) bin="$cache/node-k8s-$k8s-containerd-$containerd-cni-$cni-crictl-$crictl/bin" ;;
  *) echo "build.sh: unknown set '$what' (control-plane or node)" >&2; exit 2 ;;
esac
mkdir -p "$bin"

# Stamp the release into the binaries: an unstamped kube-apiserver reports
# v0.0.0, which kubectl and helm treat as an ancient server.
vpkg=k8s.io/component-base/version
kube_ldflags="-s -w -X $vpkg.gitVersion=$k8s -X $vpkg.gitMajor=$(echo "$k8s" | cut -d. -f1 | tr -d v)"
kube_ldflags="$kube_ldflags -X $vpkg.gitMinor=$(echo "$k8s" | cut -d. -f2) -X $vpkg.gitTreeState=clean"

# containerd stamps its version the same way (`containerd --version`, the CRI's RuntimeVersion).
ctd_ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=$containerd"

build() { # build <module dir> <output name> <package>
  local dir="$1" name="$2" pkg="$3"
  if [ -x "$bin/$name" ]; then return 0; fi
  echo "building $name ($pkg)" >&2
  local start=$SECONDS
  local ldflags='-s -w'
  if [ "$dir" = kube ]; then ldflags="$kube_ldflags"; fi
  if [ "$dir" = containerd ]; then ldflags="$ctd_ldflags"; fi
  # Everything builds static, without cgo: kubelet too (cadvisor's cgo parts are optional),
  # and containerd then leaves out only the btrfs snapshotter, which needs cgo.
  (cd "$here/$dir" && CGO_ENABLED=0 go build -trimpath -ldflags="$ldflags" -o "$bin/$name.tmp" "$pkg")
  mv "$bin/$name.tmp" "$bin/$name"
  echo "built $name in $((SECONDS - start))s" >&2
}

if [ "$what" = node ]; then
  build kube kubelet k8s.io/kubernetes/cmd/kubelet
  build containerd containerd github.com/containerd/containerd/v2/cmd/containerd
  build containerd ctr github.com/containerd/containerd/v2/cmd/ctr
  build containerd containerd-shim-runc-v2 github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
  for plugin in main/bridge ipam/host-local main/loopback meta/portmap; do
    build cni "${plugin#*/}" "github.com/containernetworking/plugins/plugins/$plugin"
  done
  build crictl crictl sigs.k8s.io/cri-tools/cmd/crictl
else
  build etcd etcd .
  build kube kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
  build kube kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager
  build kube kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler
  build kube kubectl k8s.io/kubernetes/cmd/kubectl
  build helm helm helm.sh/helm/v3/cmd/helm
fi
echo "$bin"
