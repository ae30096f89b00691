#!/usr/bin/env bash
# The demo: on the local control plane (already started by `make cluster-up`), install the CRDs,
# run the operator, apply the examples, wait for the first fire, and show `kubectl get`.
set -euo pipefail
cd "$(dirname "$0")/.."
state=.cluster/default
export KUBECONFIG="$PWD/$state/kubeconfig"
kubectl="$state/bin/kubectl"

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
http: {metricsPort: 19090, apiPort: 18080}
history: {dsn: "sqlite:///$PWD/$state/history.db"}
CONF
  setsid .venv/bin/vigil operator --config "$state/operator.yaml" >"$state/logs/operator.log" 2>&1 < /dev/null &
  echo $! > "$pidfile"
fi

echo "== applying the examples"
$kubectl apply -f manifests/examples/

echo "== waiting for the first execution (the heartbeat job fires every minute)"
for _ in $(seq 1 90); do
  if [ -n "$($kubectl get sj heartbeat -o jsonpath='{.status.lastScheduleTime}' 2>/dev/null)" ]; then break; fi
  sleep 1
done

echo "== waiting for the video-publish workflow to reach its approval step"
for _ in $(seq 1 60); do
  if [ "$($kubectl get wf video-publish -o jsonpath='{.status.steps.approve.phase}' 2>/dev/null)" = Running ]; then break; fi
  sleep 1
done

echo
echo "\$ kubectl get sj,wf"
$kubectl get sj,wf
echo
echo "\$ kubectl get pods -l app.kubernetes.io/managed-by=vigil"
$kubectl get pods -l app.kubernetes.io/managed-by=vigil
echo
echo "\$ kubectl vigil timeline video-publish"
.venv/bin/kubectl-vigil timeline video-publish
echo "(approve it as an editor: kubectl vigil approve video-publish approve --reason 'looks good')"
echo
echo "\$ kubectl vigil next reconcile-daily --count 3"
.venv/bin/kubectl-vigil next reconcile-daily --count 3
echo
echo "The control plane and operator keep running: KUBECONFIG=$KUBECONFIG. Stop them with 'make cluster-down'."
