#!/usr/bin/env bash
# The main job of Kube32, step by step, as docs/quickstart.md tells it:
#   a local cluster (a control plane and two kube32-sim workers), the counter pod pushed and run as a
#   Deployment with a Service, requests, `kubectl drain` of the worker it runs on, and the count and the
#   pod's clock going on from where they were on the other worker; then the Checkpoint, the events, and
#   the cluster stopped.
#
#   bash scripts/demo.sh                 set up (scripts/setup.sh), then run the demo
#   SKIP_SETUP=1 bash scripts/demo.sh    run the demo on an already built checkout
#   DEMO_DIR=/some/dir bash scripts/demo.sh   keep the cluster's data dir there (default: a new temp dir)
#
# The demo's cluster is its own: a data dir of its own, a free port (--port 0), and free worker addresses
# (without --first-address, up takes the next free range when another cluster holds 127.0.0.2...), so it
# runs beside a cluster you already have.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

bold() { if [ -t 1 ]; then printf '\033[1m%s\033[0m\n' "$*"; else printf '%s\n' "$*"; fi; }
step() { printf '\n'; bold "==> $*"; }
# Prints a command as the user would type it, then runs it.
show() { printf '$ %s\n' "$*"; "$@"; }
kube32-cli() { node "$ROOT/bin/kube32-cli.js" "$@"; }

if [ "${SKIP_SETUP:-0}" != 1 ]; then
  step "Install what the project needs and build it (scripts/setup.sh)"
  bash scripts/setup.sh
  hash -r
fi
command -v kubectl >/dev/null || { echo "demo: kubectl is not on PATH; install kubectl v1.32 (https://kubernetes.io/docs/tasks/tools/)" >&2; exit 1; }
[ -f build/examples/counter.wasm ] || { echo "demo: build/examples/counter.wasm is missing: run npm run build" >&2; exit 1; }

DIR=${DEMO_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/kube32-demo.XXXXXX")}
mkdir -p "$DIR"
UP_PID=
stop_cluster() {
  if [ -n "$UP_PID" ] && kill -0 "$UP_PID" 2>/dev/null; then
    kill -TERM "$UP_PID"
    wait "$UP_PID" || true
  fi
  UP_PID=
}
trap stop_cluster EXIT

step "Start a local cluster: a control plane and two workers (kube32-cli up, in the background)"
printf '$ kube32-cli up --data-dir %s --port 0 --workers 2 &\n' "$DIR"
# (node itself in the background, not the kube32-cli function, so that $! is up's own pid)
node "$ROOT/bin/kube32-cli.js" up --data-dir "$DIR" --port 0 --workers 2 >"$DIR/up.out" 2>&1 &
UP_PID=$!
# Wait for up's last line once ready (it waits for /readyz and for both Nodes to be Ready).
for _ in $(seq 1 240); do
  grep -q 'Press Ctrl-C to stop' "$DIR/up.out" && break
  kill -0 "$UP_PID" 2>/dev/null || { cat "$DIR/up.out"; echo "demo: kube32-cli up exited" >&2; exit 1; }
  sleep 0.5
done
cat "$DIR/up.out"
grep -q 'Press Ctrl-C to stop' "$DIR/up.out" || { echo "demo: the cluster was not ready in 2 minutes; logs in $DIR/logs" >&2; exit 1; }
export KUBECONFIG=$DIR/kubeconfig
show kubectl get nodes -o wide

step "Push the counter module to the cluster's module store; pods name it wasm://counter"
show kube32-cli push build/examples/counter.wasm --name counter

step "Run it as a Deployment with a Service"
show kubectl apply -f examples/counter/
show kubectl rollout status deployment/counter --timeout=90s
show kubectl get pods -o wide

step "Send it requests through the Service (the API server's service proxy): the count goes up"
for _ in 1 2 3 4 5; do
  show kubectl get --raw /api/v1/namespaces/default/services/counter/proxy/count
done

POD=$(kubectl get pods -l app=counter -o jsonpath='{.items[0].metadata.name}')
NODE=$(kubectl get pods -l app=counter -o jsonpath='{.items[0].spec.nodeName}')
step "Drain $NODE, the worker that runs $POD, with the real kubectl"
show kubectl drain "$NODE" --ignore-daemonsets --timeout=120s

step "The pod runs on the other worker, with a new uid, and goes on counting from where it was"
show kubectl get pods -o wide
for _ in 1 2 3; do
  show kubectl get --raw /api/v1/namespaces/default/services/counter/proxy/count
done

step "The Checkpoint that carried the move, and the events"
show kubectl get ckpt -o wide
show kubectl get events --field-selector involvedObject.name="$POD" --sort-by=.lastTimestamp

step "Let $NODE take pods again"
show kubectl uncordon "$NODE"

step "Stop the cluster (the workers drain first, then the control plane stops)"
printf '$ kill -TERM %s   # as Ctrl-C on kube32-cli up\n' "$UP_PID"
stop_cluster
tail -n 6 "$DIR/up.out"
echo
bold "Done. The cluster's data dir is $DIR: 'kube32-cli up --data-dir $DIR' starts it again with its objects."
