# Helpers for bench/run.sh: ports, readiness, and the servers under test.
# Every server started here is recorded in STARTED_PIDS and stopped by stop_all.

STARTED_PIDS=()
STARTED_PIDFILES=()

log() { printf '%s\n' "$*" >&2; }

# A free loopback TCP port, chosen by the OS.
free_port() {
  node -e "const s = require('net').createServer().listen(0, '127.0.0.1', () => { console.log(s.address().port); s.close() })"
}

# Waits until a full query round trip works on host:port (at most ~20 s).
wait_for_postgres() {
  local port=$1 db=$2
  for _ in $(seq 1 200); do
    psql -X -q -h 127.0.0.1 -p "$port" -U "$BENCH_USER" -d "$db" -c 'SELECT 1' >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  return 1
}

ensure_pgbouncer() {
  command -v pgbouncer >/dev/null && return 0
  if [[ $(id -u) -ne 0 ]]; then
    log 'pgbouncer is not installed (apt-get install pgbouncer) and this is not root'
    return 1
  fi
  log 'installing pgbouncer from the Debian packages'
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null
}

# PgBouncer on $1, forwarding database $2 to the local PostgreSQL, in pool mode $3 (session) with
# auth_type $4 (trust; else BENCH_PASSWORD from its userlist). It refuses to run as root, so as
# root it runs as the postgres user.
start_pgbouncer() {
  local port=$1 db=$2 mode=${3:-session} auth=${4:-trust}
  local dir="$WORK_DIR/pgbouncer-$mode-$auth"
  mkdir -p "$dir"
  printf '"%s" "%s"\n' "$BENCH_USER" "$BENCH_PASSWORD" >"$dir/userlist.txt"
  cat >"$dir/pgbouncer.ini" <<INI
[databases]
$db = host=$PG_HOST port=$PG_PORT dbname=$db

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = $auth
auth_file = $dir/userlist.txt
pool_mode = $mode
max_client_conn = 100
default_pool_size = 20
ignore_startup_parameters = extra_float_digits
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
  local runner=()
  if [[ $(id -u) -eq 0 ]]; then
    chown -R postgres "$dir"
    runner=(runuser -u postgres --)
  fi
  "${runner[@]}" pgbouncer -d "$dir/pgbouncer.ini"
  STARTED_PIDFILES+=("$dir/pgbouncer.pid")
  wait_for_postgres "$port" "$db" || {
    log "pgbouncer did not start; its log:"
    cat "$dir/pgbouncer.log" >&2
    return 1
  }
}

# pgfence on $1 in front of the local PostgreSQL, fencing the tables in $2 (a YAML flow list),
# pooling in mode $4 (none) with the same userlist as PgBouncer's.
start_pgfence() {
  local port=$1 tables=$2 name=$3 mode=${4:-none}
  local config="$WORK_DIR/$name.yaml"
  printf '"%s" "%s"\n' "$BENCH_USER" "$BENCH_PASSWORD" >"$WORK_DIR/$name-userlist.txt"
  cat >"$config" <<YAML
listen: { host: 127.0.0.1, port: $port }
upstream: { host: $PG_HOST, port: $PG_PORT, tls: disable }
log: { level: warn }
fencing: { tables: $tables }
pool: { mode: $mode, size: 20 }
auth: { file: $WORK_DIR/$name-userlist.txt }
YAML
  node dist/cli/main.js start --config "$config" >"$WORK_DIR/$name.log" 2>&1 &
  STARTED_PIDS+=($!)
  wait_for_postgres "$port" "$BENCH_DB" || {
    log "pgfence ($name) did not start; its log:"
    tail -n 20 "$WORK_DIR/$name.log" >&2
    return 1
  }
}

stop_all() {
  local pid pidfile
  for pid in "${STARTED_PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  for pidfile in "${STARTED_PIDFILES[@]}"; do
    [[ -f $pidfile ]] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
}
