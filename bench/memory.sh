#!/usr/bin/env bash
# npm run bench:memory: the proxy's resident memory per idle client, and across connect /
# disconnect cycles. A throwaway PostgreSQL cluster (max_connections 600) on a free port, pgfence
# in front of it as its own process, then bench/memory.mjs opens idle clients in cycles and
# reads the proxy's VmRSS.
#
#   MEMORY_CLIENTS   idle clients per cycle (250)
#   MEMORY_CYCLES    connect / disconnect cycles (10)
#   MEMORY_RELAY     native | node (native)
#   MEMORY_UPSTREAM_TLS  upstream.tls (prefer; the throwaway cluster has no TLS)
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

MEMORY_CLIENTS=${MEMORY_CLIENTS:-250}
MEMORY_CYCLES=${MEMORY_CYCLES:-10}
MEMORY_RELAY=${MEMORY_RELAY:-native}
MEMORY_UPSTREAM_TLS=${MEMORY_UPSTREAM_TLS:-prefer}
BENCH_USER=postgres
BENCH_DB=postgres
PG_HOST=127.0.0.1
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
[[ -d $PG_BIN ]] && export PATH="$PG_BIN:$PATH"

WORK_DIR=$(mktemp -d -t pgfence-memory-XXXXXX)
chmod 755 "$WORK_DIR"
runner=()
[[ $(id -u) -eq 0 ]] && runner=(runuser -u postgres --) && chown postgres "$WORK_DIR"
cleanup() {
  stop_all
  "${runner[@]}" pg_ctl -D "$WORK_DIR/pg" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$WORK_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

PG_PORT=$(free_port)
"${runner[@]}" initdb -D "$WORK_DIR/pg" -U postgres -A trust >/dev/null
"${runner[@]}" pg_ctl -D "$WORK_DIR/pg" -l "$WORK_DIR/pg.log" -w \
  -o "-p $PG_PORT -k $WORK_DIR -c listen_addresses=127.0.0.1 -c max_connections=$((MEMORY_CLIENTS + 50)) -c shared_buffers=16MB -c fsync=off" \
  start >/dev/null
psql -X -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -c \
  'CREATE TABLE invoices (id int PRIMARY KEY, fencing_token bigint NOT NULL DEFAULT 0)'

port=$(free_port)
cat >"$WORK_DIR/pgfence.yaml" <<YAML
listen: { host: 127.0.0.1, port: $port }
upstream: { host: 127.0.0.1, port: $PG_PORT, tls: $MEMORY_UPSTREAM_TLS }
limits: { maxClientConnections: $((MEMORY_CLIENTS + 10)) }
log: { level: warn }
relay: $MEMORY_RELAY
fencing: { tables: [{ name: invoices }] }
YAML
node dist/cli/main.js start --config "$WORK_DIR/pgfence.yaml" >"$WORK_DIR/pgfence.log" 2>&1 &
pid=$!
STARTED_PIDS+=("$pid")
wait_for_postgres "$port" postgres || {
  log 'pgfence did not start; its log:'
  tail -n 20 "$WORK_DIR/pgfence.log" >&2
  exit 1
}
log "pgfence (pid $pid, relay $MEMORY_RELAY) on $port, PostgreSQL on $PG_PORT"
node bench/memory.mjs "$pid" "$port" "$MEMORY_CLIENTS" "$MEMORY_CYCLES"
