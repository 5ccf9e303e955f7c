#!/usr/bin/env bash
# jobgate quickstart: run a job end to end, twice.
#   1. `jobgate serve` (both services, embedded store) + a worker running the
#      text_stats example on examples/sample.txt.
#   2. The production shape: a private redis-server, `jobgate gateway`,
#      `jobgate worker-server` and a worker running the staged example.
# Everything runs on loopback on free ports, in a temp dir, and is stopped at the end.
# `make demo` builds .venv and runs this. Needs: .venv (or VENV_BIN / JOBGATE_BIN and
# PYTHON_BIN). Run 2 also needs redis-server on PATH; without it run 2 is skipped and
# said so, and the script still exits 0: run 1 alone shows the whole job lifecycle.
set -euo pipefail

cd "$(dirname "$0")/.."
VENV_BIN="${VENV_BIN:-.venv/bin}"
JOBGATE="${JOBGATE_BIN:-$VENV_BIN/jobgate}"
PYTHON="${PYTHON_BIN:-$VENV_BIN/python}"
if [[ ! -x "$JOBGATE" || ! -x "$PYTHON" ]]; then
  echo "quickstart: $JOBGATE not found; run 'make demo' (it builds .venv first)" >&2
  exit 2
fi
REDIS_HINT="Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis"
# Settings from the caller's shell must not redirect the demo.
unset JOBGATE_TARGET JOBGATE_TOKEN JOBGATE_TENANT JOBGATE_REDIS_URL JOBGATE_WORKER_TARGET

WORK="$(mktemp -d "${TMPDIR:-/tmp}/jobgate-quickstart.XXXXXX")"
PIDS=()

stop() {  # stop one process by pid: SIGTERM, then wait for its drain
  local pid="$1"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
}

cleanup() {
  local status=$?
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do stop "${PIDS[i]}"; done
  if [[ $status -ne 0 ]]; then
    echo "quickstart failed; logs:" >&2
    for log in "$WORK"/*.log; do [[ -f "$log" ]] && { echo "== $log" >&2; tail -n 20 "$log" >&2; }; done
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start() {  # start NAME COMMAND...: run in the background, output to $WORK/NAME.log
  local name="$1"
  shift
  "$@" >"$WORK/$name.log" 2>&1 &
  PIDS+=("$!")
}

wait_for_line() {  # wait_for_line NAME TEXT: until the process's log shows TEXT
  local name="$1" text="$2" pid="${PIDS[-1]}"
  for _ in $(seq 1 300); do
    grep -q "$text" "$WORK/$name.log" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || { echo "$name exited:" >&2; cat "$WORK/$name.log" >&2; return 1; }
    sleep 0.1
  done
  echo "$name did not report '$text' within 30 s" >&2
  return 1
}

if [[ -t 1 ]]; then BOLD=$'\033[1m' PLAIN=$'\033[0m'; else BOLD="" PLAIN=""; fi
say() { printf '\n%s==> %s%s\n' "$BOLD" "$*" "$PLAIN"; }
run() { printf '$ %s\n' "$*"; "$@"; }

# ------------------------------------------------------------------ 1. embedded
say "1/2: jobgate serve on the embedded store, one text_stats worker"
JOB_PORT="$(free_port)"
WORKER_PORT="$(free_port)"
start serve "$JOBGATE" serve --listen "127.0.0.1:$JOB_PORT" \
  --worker-listen "127.0.0.1:$WORKER_PORT" --metrics-listen off
wait_for_line serve "listening"
echo "serve: JobService on 127.0.0.1:$JOB_PORT, WorkerService on 127.0.0.1:$WORKER_PORT"
start worker "$JOBGATE" worker --target "127.0.0.1:$WORKER_PORT" \
  --model text-stats --handler examples.handlers:text_stats
wait_for_line worker "serving models"

export JOBGATE_TARGET="127.0.0.1:$JOB_PORT"
run "$JOBGATE" submit --model text-stats --file examples/sample.txt --label source=sample --wait \
  | tee "$WORK/submit.out"
JOB_ID="$(awk '/^submitted/ {print $2}' "$WORK/submit.out")"
run "$JOBGATE" get "$JOB_ID"
grep -q "status    COMPLETED" <("$JOBGATE" get "$JOB_ID")

say "stopping the worker and the server (SIGTERM: they drain and exit)"
stop "${PIDS[1]}"
stop "${PIDS[0]}"
PIDS=()

# ------------------------------------------------------------------ 2. Redis
if ! command -v redis-server >/dev/null; then
  say "2/2 skipped: redis-server is not on PATH"
  echo "The Redis run needs redis-server ($REDIS_HINT), then run this again."
  say "quickstart done: the embedded run completed; the Redis run was skipped"
  exit 0
fi
say "2/2: redis-server + jobgate gateway + jobgate worker-server + a staged worker"
REDIS_PORT="$(free_port)"
mkdir -p "$WORK/redis"
start redis redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --dir "$WORK/redis" \
  --save "" --appendonly yes --appendfsync everysec --maxmemory-policy noeviction
wait_for_line redis "Ready to accept connections"
REDIS_URL="redis://127.0.0.1:$REDIS_PORT/0"
echo "redis-server on 127.0.0.1:$REDIS_PORT (AOF on, noeviction)"

GATEWAY_PORT="$(free_port)"
WORKER_SERVER_PORT="$(free_port)"
METRICS_PORT="$(free_port)"
start gateway "$JOBGATE" gateway --redis-url "$REDIS_URL" --listen "127.0.0.1:$GATEWAY_PORT" \
  --metrics-listen "127.0.0.1:$METRICS_PORT"
wait_for_line gateway "listening"
start worker-server "$JOBGATE" worker-server --redis-url "$REDIS_URL" \
  --listen "127.0.0.1:$WORKER_SERVER_PORT" --metrics-listen off
wait_for_line worker-server "listening"
echo "gateway on 127.0.0.1:$GATEWAY_PORT (metrics :$METRICS_PORT), worker-server on 127.0.0.1:$WORKER_SERVER_PORT"
start staged-worker "$JOBGATE" worker --target "127.0.0.1:$WORKER_SERVER_PORT" \
  --model staged --handler examples.handlers:staged --concurrency 2
wait_for_line staged-worker "serving models"

export JOBGATE_TARGET="127.0.0.1:$GATEWAY_PORT"
run "$JOBGATE" submit --model staged --file examples/sample.txt --label stage_seconds=0.6 \
  --priority interactive --wait | tee "$WORK/staged.out"
grep -q "COMPLETED" "$WORK/staged.out"
STAGED_ID="$(awk '/^submitted/ {print $2}' "$WORK/staged.out")"
run "$JOBGATE" get "$STAGED_ID"

say "the gateway's metrics (Prometheus text on /metrics)"
"$PYTHON" - "$METRICS_PORT" <<'PY'
import sys
import urllib.request

text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=5).read().decode()
for line in text.splitlines():
    if line.startswith("jobgate_jobs_submitted_total"):
        print(line)
PY

say "stopping the worker, the servers and redis-server"
for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do stop "${PIDS[i]}"; done
PIDS=()
say "quickstart done: both runs completed"
