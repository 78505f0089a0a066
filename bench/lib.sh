# Helpers for bench/run.sh: ports, readiness, and the servers under test.
# Every server started here is recorded in STARTED_PIDS and stopped by stop_all.

STARTED_PIDS=()
STARTED_PIDFILES=()
# The process id of the proxy listening on each port, for its CPU time.
declare -A PROXY_PID=()
STOP_CLUSTERS=()

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

# As root, PostgreSQL and PgBouncer run as the postgres user.
as_postgres() {
  if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# A self-signed certificate for localhost in $1/server.{crt,key}, readable by the postgres user.
make_cert() {
  local dir=$1
  mkdir -p "$dir"
  openssl req -x509 -nodes -days 2 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
    -keyout "$dir/server.key" -out "$dir/server.crt" -subj /CN=localhost \
    -addext 'subjectAltName=DNS:localhost,IP:127.0.0.1' 2>/dev/null
  chmod 600 "$dir/server.key"
  [[ $(id -u) -eq 0 ]] && chown -R postgres "$dir"
  return 0
}

# A throwaway PostgreSQL cluster with ssl=on on port $1 (the shared server is never reconfigured),
# its certificate in $WORK_DIR/tls-cluster. Stopped by stop_all.
start_tls_cluster() {
  local port=$1 dir="$WORK_DIR/tls-cluster"
  make_cert "$dir"
  as_postgres initdb -D "$dir/data" -U "$BENCH_USER" --auth=trust -E UTF8 --no-sync >/dev/null
  cat >>"$dir/data/postgresql.conf" <<CONF
port = $port
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
max_connections = 100
ssl = on
ssl_cert_file = '$dir/server.crt'
ssl_key_file = '$dir/server.key'
CONF
  as_postgres pg_ctl -D "$dir/data" -l "$dir/server.log" -w start >/dev/null
  STOP_CLUSTERS+=("$dir/data")
}

# The SCRAM secret PostgreSQL stores for BENCH_PASSWORD (what pg_authid, hence a production
# userlist or auth_query, holds), read from a throwaway role: the shared server's roles stay as
# they are, and the secret does not depend on the role's name.
scram_secret() {
  local role="pgfence_bench_secret_$$"
  psql -X -q -At -h "$PG_HOST" -p "$PG_PORT" -U "$BENCH_USER" -d postgres \
    -c "SET password_encryption = 'scram-sha-256'" \
    -c "CREATE ROLE $role PASSWORD '$BENCH_PASSWORD'" \
    -c "SELECT rolpassword FROM pg_authid WHERE rolname = '$role'" \
    -c "DROP ROLE $role"
}

# CPU time (user + system, clock ticks) the process $1 has used so far.
cpu_ticks() {
  awk '{ print $14 + $15 }' "/proc/$1/stat"
}

# PgBouncer on $1, forwarding database $2 to the PostgreSQL on $PG_PORT, in pool mode $3
# (session) with auth_type $4 (trust; else USERLIST_SECRET, the SCRAM secret unless a caller
# sets the plaintext password, from its userlist). $5: more settings (TLS), as ini lines. It
# refuses to run as root, so as root it runs as the postgres user.
start_pgbouncer() {
  local port=$1 db=$2 mode=${3:-session} auth=${4:-trust} extra=${5:-}
  local dir="$WORK_DIR/pgbouncer-$port"
  mkdir -p "$dir"
  printf '"%s" "%s"\n' "$BENCH_USER" "$USERLIST_SECRET" >"$dir/userlist.txt"
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
$extra
INI
  [[ $(id -u) -eq 0 ]] && chown -R postgres "$dir"
  as_postgres pgbouncer -d "$dir/pgbouncer.ini"
  STARTED_PIDFILES+=("$dir/pgbouncer.pid")
  wait_for_postgres "$port" "$db" || {
    log "pgbouncer did not start; its log:"
    cat "$dir/pgbouncer.log" >&2
    return 1
  }
  PROXY_PID[$port]=$(cat "$dir/pgbouncer.pid")
}

# pgfence on $1 in front of the PostgreSQL on $PG_PORT, fencing the tables in $2 (a YAML flow
# list), pooling in mode $4 (none) with a userlist like PgBouncer's (USERLIST_SECRET); $5:
# upstream.tls (disable); $6: more top-level YAML (the client-side tls section).
start_pgfence() {
  local port=$1 tables=$2 name=$3 mode=${4:-none} upstream_tls=${5:-disable} extra=${6:-}
  local config="$WORK_DIR/$name.yaml"
  printf '"%s" "%s"\n' "$BENCH_USER" "$USERLIST_SECRET" >"$WORK_DIR/$name-userlist.txt"
  cat >"$config" <<YAML
listen: { host: 127.0.0.1, port: $port }
upstream: { host: $PG_HOST, port: $PG_PORT, tls: $upstream_tls }
log: { level: warn }
fencing: { tables: $tables }
pool: { mode: $mode, size: 20 }
auth: { file: $WORK_DIR/$name-userlist.txt }
$extra
YAML
  # A session of its own, as PgBouncer's daemon mode gives it: Linux schedules each session as
  # one group (autogroup), and a proxy in pgbench's session shares pgbench's CPU share and is
  # switched out more often per transaction. (setsid execs in place: $! is pgfence's pid.)
  # shellcheck disable=SC2086 # PGFENCE_NODE_OPTIONS: words for node (--cpu-prof, to profile)
  setsid node ${PGFENCE_NODE_OPTIONS:-} "${PGFENCE_MAIN:-dist/cli/main.js}" start --config "$config" \
    >"$WORK_DIR/$name.log" 2>&1 &
  STARTED_PIDS+=($!)
  PROXY_PID[$port]=$!
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
  for data in "${STOP_CLUSTERS[@]}"; do
    as_postgres pg_ctl -D "$data" -m immediate -w stop >/dev/null 2>&1 || true
  done
}
