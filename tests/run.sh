#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs the project and the servers the tests
# need, starts them on loopback, runs pytest, and stops every server it started by PID.
# Usage: bash tests/run.sh [extra pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
RUN_DIR="$ROOT/.test-services"
PY=${PYTHON:-python3}
PIDS=()

log() { printf '[run.sh] %s\n' "$*" >&2; }

stop_servers() {
  for pid in "${PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
}
trap stop_servers EXIT

# port_free, pick_port and wait_for_port (tests/test_run_script.py checks pick_port)
# shellcheck source=tests/ports.sh
source tests/ports.sh

install_python() {
  if [ ! -x .venv/bin/python ]; then "$PY" -m venv .venv; fi
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'
}

check_lint_and_types() {  # ruff on the Python tree; mypy --strict on it all, in one run
  local code=(state backends tests examples benchmarks)
  .venv/bin/ruff check --quiet "${code[@]}"
  .venv/bin/ruff format --check --quiet "${code[@]}"
  # mypy reads the package under its import name, so check the tree pip would install; the
  # tests, examples and benchmarks import it from there (their few relaxations: pyproject.toml)
  local typed="$RUN_DIR/typed"
  rm -rf build  # setuptools keeps modules a move left behind there
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation \
    --target "$typed" . >/dev/null
  MYPYPATH="$typed" .venv/bin/mypy --strict --no-incremental "$typed/agent_state" tests examples benchmarks
  # and the source folders as they are, the way pyproject.toml's overrides describe
  .venv/bin/mypy --strict --no-incremental state backends
}

install_redis() {
  if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
    log "installing redis-server (Debian package)"
    apt-get update -qq >/dev/null && apt-get install -y -qq redis-server >/dev/null
  fi
}

start_redis() {  # start_redis PORT DIR [extra args]: foreground server in the background, PID kept
  local port=$1 dir=$2; shift 2
  mkdir -p "$dir" && rm -f "$dir/nodes.conf"
  redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --daemonize no \
    --dir "$dir" --logfile "$dir/redis.log" "$@" &
  PIDS+=($!)
  wait_for_port "$port" "redis-server"
}

start_redis_cluster() {  # start_redis_cluster PORT...: one node per port, then the cluster
  local nodes=() p
  for p in "$@"; do
    local bus=$((p + 10000))  # the bus port is the node's port + 10000 unless given
    if ((bus > 65535)) || ! port_free "$bus"; then bus=$(pick_port 0); fi
    start_redis "$p" "$RUN_DIR/cluster-$p" --cluster-enabled yes --cluster-config-file nodes.conf \
      --cluster-port "$bus"
    nodes+=("127.0.0.1:$p")
  done
  redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >/dev/null
  local deadline=$((SECONDS + 30))
  until redis-cli -p "$1" cluster info | grep -q 'cluster_state:ok'; do
    if ((SECONDS > deadline)); then log "redis cluster did not become ready"; exit 1; fi
    sleep 0.1
  done
}

# Each further service has its own script in tests/services/: it defines
# install_<name> and start_<name> (using PIDS, RUN_DIR, log, wait_for_port, port_free)
# and exports the variables its tests read; a start_<name> takes a free port with pick_port.
SERVICES=()
for script in tests/services/*.sh; do
  [ -e "$script" ] || continue
  # shellcheck source=/dev/null
  source "$script"
  SERVICES+=("$(basename "$script" .sh)")
done

install_python
install_redis
for service in "${SERVICES[@]}"; do "install_$service"; done
rm -rf "$RUN_DIR" && mkdir -p "$RUN_DIR"
check_lint_and_types
REDIS_PORT=$(pick_port 6390)
start_redis "$REDIS_PORT" "$RUN_DIR/redis"
CLUSTER_PORTS=()
for preferred in 7000 7001 7002; do CLUSTER_PORTS+=("$(pick_port "$preferred")"); done
start_redis_cluster "${CLUSTER_PORTS[@]}"
for service in "${SERVICES[@]}"; do "start_$service"; done

export AGENT_STATE_REQUIRE_SERVERS=1
export AGENT_STATE_REDIS_URL="redis://127.0.0.1:$REDIS_PORT/0"
export AGENT_STATE_REDIS_CLUSTER_URL="redis://127.0.0.1:${CLUSTER_PORTS[0]}/0"

set +e
# three workers (pytest-xdist): most of a test's time is waiting on a server or a process, so
# this fills two cores; then, alone, the few tests that read a shared server's own statistics
.venv/bin/python -m pytest -q -n 3 -m "not serial" "$@"
parallel=$?
.venv/bin/python -m pytest -q -m serial "$@"
alone=$?
set -e
if [ "$parallel" -eq 5 ] && [ "$alone" -eq 5 ]; then log "pytest collected no tests"; exit 1; fi
for status in "$parallel" "$alone"; do  # 5: that part collected nothing
  if [ "$status" -ne 0 ] && [ "$status" -ne 5 ]; then exit "$status"; fi
done
