#!/usr/bin/env bash
# The demo: on the local control plane (already started by `make cluster-up`), install Vigil, apply
# the examples, wait for the first fire, and show `kubectl get`. On the kubelet node (the default)
# Vigil is installed as users install it: `make image`'s image and `helm install` of helm/vigil.
# On NODE=agent the operator runs as a local process instead (that node runs no containers).
set -euo pipefail
cd "$(dirname "$0")/.."
state="$(realpath "${VIGIL_DEMO_STATE:-.cluster/default}")"  # its test passes a cluster of its own
export KUBECONFIG="$state/kubeconfig"
kubectl="$state/bin/kubectl"

node="$(cat "$state/node-kind" 2>/dev/null || echo agent)"
if [ "$node" = kubelet ]; then
  # The user's path: the image `make image` builds, loaded into the node's containerd, and the
  # chart installed with it; the operator runs in-cluster under the chart's own RBAC.
  echo "== installing Vigil with Helm: the built image, the chart, one operator pod on the kubelet node"
  .venv/bin/python -m e2e.cluster.release demo --state "$state"
else
  # NODE=agent: the fast node agent runs no containers, so the operator runs here as a process.
  echo "== installing the CRDs"
  $kubectl apply --server-side --force-conflicts -f crds/ >/dev/null
  $kubectl wait --for=condition=Established --timeout=60s crd --all >/dev/null
  # The admission policy that checks who makes a workflow request (see docs/workflows.md).
  $kubectl apply -f helm/vigil/files/admission/workflow-requests.yaml >/dev/null
  $kubectl create namespace vigil-system --dry-run=client -o yaml | $kubectl apply -f - >/dev/null

  pidfile="$state/pids/operator.pid"
  if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    echo "== the operator is already running (pid $(cat "$pidfile"))"
  else
    echo "== starting the operator (log: $state/logs/operator.log)"
    cat > "$state/operator.yaml" <<CONF
namespace: vigil-system
leaderElection: {leaseDurationSeconds: 15, renewPeriodSeconds: 5}
http: {metricsPort: 19090, apiPort: 18080, healthPort: 18081}
history: {dsn: "sqlite:///$state/history.db"}
CONF
    setsid .venv/bin/vigil operator --config "$state/operator.yaml" >"$state/logs/operator.log" 2>&1 < /dev/null &
    echo $! > "$pidfile"
  fi
fi

echo "== applying the examples, and the demo's editor (group editors may approve workflows in default)"
$kubectl apply -f manifests/examples/
$kubectl apply -n default -f scripts/demo-editor.yaml

echo "== waiting for the first execution (the heartbeat job fires every minute)"
for _ in $(seq 1 90); do
  if [ -n "$($kubectl get sj heartbeat -o jsonpath='{.status.lastScheduleTime}' 2>/dev/null)" ]; then break; fi
  sleep 1
done

echo "== waiting for the video-publish workflow to reach its approval step"
for _ in $(seq 1 60); do
  case "$($kubectl get vwf video-publish -o jsonpath='{.status.steps.approve.phase}' 2>/dev/null)" in
    Running|Succeeded) break ;;  # Succeeded: approved after an earlier run of the demo
  esac
  sleep 1
done

echo
echo "\$ kubectl get sj,vwf"
$kubectl get sj,vwf
echo
echo "\$ kubectl get pods -A   # the operator in vigil-system, the jobs' pods beside it"
$kubectl get pods -A
echo
echo "\$ kubectl vigil timeline video-publish"
.venv/bin/kubectl-vigil timeline video-publish
# The hint is run as printed by tests/integration/test_demo_hints.py: keep it one line, in quotes.
approve_hint="kubectl vigil --as demo-editor --as-group editors approve video-publish approve --reason 'looks good'"
echo "(approve it as an editor, a member of group editors: $approve_hint)"
echo
echo "\$ kubectl vigil next reconcile-daily --count 3"
.venv/bin/kubectl-vigil next reconcile-daily --count 3
echo
echo "The control plane and operator keep running. To paste the commands above (kubectl finds the"
echo "vigil plugin on PATH): export KUBECONFIG=$KUBECONFIG PATH=$PWD/.venv/bin:$state/bin:\$PATH"
echo "Stop them with 'make cluster-down'."
