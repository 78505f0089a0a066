#!/usr/bin/env bash
# npm run bench: pgbench through direct PostgreSQL, PgBouncer (session mode) and pgfence.
#
# Pooled tables: pgbench -S with SCRAM clients through PgBouncer and pgfence pooling in the
# same mode and pool size: session, then transaction.
# Table 1 (passthrough): pgbench -S in simple, extended and prepared modes; pgfence fences
# nothing. Table 2 (fenced writes, BENCH_FENCED=1): an UPDATE of pgbench_accounts with the token
# given by SET or by a comment, through a pgfence fencing pgbench_accounts (in a database of its
# own, migrated: fence column and triggers) vs one fencing nothing (a database with no fencing).
# Table 3 (TLS, BENCH_TLS=1): pgbench -S against a throwaway PostgreSQL with ssl=on, through
# PgBouncer with server_tls_sslmode=require and pgfence with upstream.tls: require; then with TLS
# from pgbench too (sslmode=require; PgBouncer client_tls_sslmode=require, pgfence's tls section).
# Logins table: pgbench -S -C (a new connection per transaction) through each pool mode, plain
# and with TLS from pgbench, and with a plaintext userlist; beside TPS, the proxy's own CPU per
# login (utime + stime from /proc/<pid>/stat over the run, divided by the logins). The session row
# also measures Node's floor (bench/login-floor.mjs): a Node server that authenticates with the
# same SCRAM secret and answers from memory, with no server leg or pool, i.e. the least a login
# can cost a proxy on Node's net module.
# Userlists (PgBouncer's auth_file, pgfence's auth.file) hold the SCRAM secret PostgreSQL stores
# for BENCH_PASSWORD, as production ones do; only the labelled plaintext row holds the password.
# BENCH_ONLY=tls runs only table 3; BENCH_ONLY=session only the session-pool table;
# BENCH_ONLY=transaction only the transaction-pool table; BENCH_ONLY=fenced only table 2;
# BENCH_ONLY=login only the logins table.
# Measurements are interleaved (each round visits every mode and target) and each cell is the
# median over the rounds; each ratio is the median of the rounds' own ratios. Each measurement first runs BENCH_WARMUP seconds unmeasured: every new
# client connection through a session-mode proxy (or directly) gets a new PostgreSQL backend,
# which takes seconds to reach full speed, while PgBouncer hands out backends it has kept warm
# since the previous round. Only the steady state after the warm-up is compared.
set -euo pipefail

cd "$(dirname "$0")/.."
BENCH_DIR=bench
# shellcheck source=bench/lib.sh
source "$BENCH_DIR/lib.sh"

BENCH_SECONDS=${BENCH_SECONDS:-10}
BENCH_WARMUP=${BENCH_WARMUP:-8}
BENCH_ROUNDS=${BENCH_ROUNDS:-3}
BENCH_FENCED=${BENCH_FENCED:-1}
BENCH_TLS=${BENCH_TLS:-1}
BENCH_ONLY=${BENCH_ONLY:-}
BENCH_LOGIN_WARMUP=${BENCH_LOGIN_WARMUP:-3}
BENCH_LOGIN_JIT_WARMUP=${BENCH_LOGIN_JIT_WARMUP:-15}
BENCH_CLIENTS=${BENCH_CLIENTS:-8}
BENCH_JOBS=${BENCH_JOBS:-2}
BENCH_SCALE=${BENCH_SCALE:-10}
BENCH_DB=${BENCH_DB:-pgfence_bench}
BENCH_FENCED_DB=${BENCH_DB}_fenced
BENCH_USER=${BENCH_USER:-postgres}
# Pooled targets authenticate clients with SCRAM from a userlist; PostgreSQL itself may trust.
BENCH_PASSWORD=${BENCH_PASSWORD:-bench-secret}
export PGPASSWORD=$BENCH_PASSWORD
PG_HOST=127.0.0.1
PG_PORT=${BENCH_PG_PORT:-5432}
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
[[ -d $PG_BIN ]] && export PATH="$PG_BIN:$PATH"

WORK_DIR=$(mktemp -d -t pgfence-bench-XXXXXX)
chmod 755 "$WORK_DIR"
RESULTS="$WORK_DIR/results.tsv"
cleanup() {
  stop_all
  rm -rf "$WORK_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Runs one pgbench measurement; appends "table, row, target, tps" (tps FAIL on error) to RESULTS.
# The TPS is the mean of pgbench's per-second progress reports after the warm-up.
measure() {
  local table=$1 row=$2 target=$3 port=$4 db=${MEASURE_DB:-$BENCH_DB}
  shift 4
  local output tps=FAIL
  if [[ -z $port ]]; then
    log "    $row via $target: not running"
  elif output=$(pgbench -n -h 127.0.0.1 -p "$port" -U "$BENCH_USER" -c "$BENCH_CLIENTS" \
    -j "$BENCH_JOBS" -T "$((BENCH_WARMUP + BENCH_SECONDS))" -P 1 "$@" "$db" 2>&1); then
    tps=$(awk -v warmup="$BENCH_WARMUP" '
      /^progress: / { if (++seconds > warmup) { sum += $4; n++ } }
      END { if (n > 0) printf "%.1f", sum / n }' <<<"$output")
    log "    $row via $target: $tps tps"
  else
    log "    $row via $target: pgbench failed: $(tail -n 2 <<<"$output" | tr '\n' ' ')"
  fi
  printf '%s\t%s\t%s\t%s\n' "$table" "$row" "$target" "${tps:-FAIL}" >>"$RESULTS"
}

# One -C measurement: BENCH_LOGIN_WARMUP seconds unmeasured (a pool fills), then BENCH_SECONDS
# during which the proxy's CPU time is counted; appends "login, row, target, tps, cpu ms per
# login" (cpu - when there is no proxy process to read) to RESULTS.
measure_login() {
  local row=$1 target=$2 port=$3 pid=${PROXY_PID[${3:-none}]:-} output before after
  local tps=FAIL cpu=-
  local run=(pgbench -n -h 127.0.0.1 -p "$port" -U "$BENCH_USER" -c "$BENCH_CLIENTS"
    -j "$BENCH_JOBS" -S -C -M simple)
  if [[ -z $port ]]; then
    log "    $row via $target: not running"
  else
    "${run[@]}" -T "$BENCH_LOGIN_WARMUP" "$BENCH_DB" >/dev/null 2>&1 || true
    [[ -n $pid ]] && before=$(cpu_ticks "$pid")
    if output=$("${run[@]}" -T "$BENCH_SECONDS" "$BENCH_DB" 2>&1); then
      [[ -n $pid ]] && after=$(cpu_ticks "$pid")
      read -r tps cpu < <(awk -v ticks="$((${after:-0} - ${before:-0}))" -v hz="$(getconf CLK_TCK)" \
        -v pid="$pid" '
        /actually processed/ { split($NF, n, "/"); logins = n[1] }
        /^tps = / { tps = $3 }
        END {
          cpu = (pid != "" && logins > 0) ? sprintf("%.3f", ticks * 1000 / hz / logins) : "-"
          printf "%.1f %s\n", tps, cpu
        }' <<<"$output")
      log "    $row via $target: $tps tps, $cpu ms CPU per login"
    else
      log "    $row via $target: pgbench failed: $(tail -n 2 <<<"$output" | tr '\n' ' ')"
    fi
  fi
  printf 'login\t%s\t%s\t%s\t%s\n' "$row" "$target" "$tps" "$cpu" >>"$RESULTS"
}

summarize() {
  awk -v table="$1" -v targets="$2" -v ratios="$3" -v cpu="${4:-}" \
    -f "$BENCH_DIR/summarize.awk" "$RESULTS"
}

prepare_database() {
  local db=${1:-$BENCH_DB}
  log "==> database $db: pgbench -i -s $BENCH_SCALE"
  dropdb -h "$PG_HOST" -p "$PG_PORT" -U "$BENCH_USER" --if-exists "$db"
  createdb -h "$PG_HOST" -p "$PG_PORT" -U "$BENCH_USER" "$db"
  pgbench -i -q -s "$BENCH_SCALE" -h "$PG_HOST" -p "$PG_PORT" -U "$BENCH_USER" "$db" 2>&1 |
    tail -n 1 >&2
  # The write benchmark compares CPU cost: without this, each commit waits for a WAL flush and
  # the disk's latency (noisy on shared machines) decides the TPS and hides fencing's cost.
  psql -X -q -h "$PG_HOST" -p "$PG_PORT" -U "$BENCH_USER" -d "$db" \
    -c "ALTER DATABASE $db SET synchronous_commit = off"
}

run_passthrough() {
  local round mode
  for round in $(seq 1 "$BENCH_ROUNDS"); do
    log "==> passthrough round $round/$BENCH_ROUNDS (${BENCH_WARMUP}s warm-up + ${BENCH_SECONDS}s each)"
    for mode in simple extended prepared; do
      measure passthrough "$mode" direct "$PG_PORT" -S -M "$mode"
      measure passthrough "$mode" pgbouncer "$PGBOUNCER_PORT" -S -M "$mode"
      measure passthrough "$mode" pgfence "$PGFENCE_PORT" -S -M "$mode"
    done
  done
}

# Pooled targets: PgBouncer and pgfence pooling in the same mode (table "pooled": session,
# "transaction": transaction), both authenticating clients with SCRAM (logins: run_logins).
run_pooled() {
  local table=$1 bouncer=$2 fence=$3 round mode
  for round in $(seq 1 "$BENCH_ROUNDS"); do
    log "==> $table round $round/$BENCH_ROUNDS (${BENCH_WARMUP}s warm-up + ${BENCH_SECONDS}s each)"
    for mode in simple extended prepared; do
      measure "$table" "$mode" pgbouncer "$bouncer" -S -M "$mode"
      measure "$table" "$mode" pgfence "$fence" -S -M "$mode"
    done
  done
}

# Logins (-C): both proxies in each pool mode, with client TLS and with a plaintext userlist;
# pgfence without pooling beside direct PostgreSQL (each login a new backend).
run_logins() {
  local round port sslmode
  # V8 optimizes code called once per login only after some thousands of logins: each pgfence
  # first runs logins unmeasured for a while, as a long-running proxy would have.
  log "==> logins: ${BENCH_LOGIN_JIT_WARMUP}s of logins through each pgfence first"
  for port in "$PGFENCE_POOLED_PORT" "$PGFENCE_TRANSACTION_PORT" "$PGFENCE_LOGIN_TLS_PORT" \
    "$PGFENCE_TRANSACTION_TLS_PORT" "$PGFENCE_PLAIN_PORT" "$PGFENCE_PORT" "$NODE_FLOOR_PORT"; do
    [[ -n $port ]] || continue
    sslmode=${PGSSLMODE:-prefer}
    [[ $port == "$PGFENCE_LOGIN_TLS_PORT" || $port == "$PGFENCE_TRANSACTION_TLS_PORT" ]] &&
      sslmode=require
    PGSSLMODE=$sslmode pgbench -n -h 127.0.0.1 -p "$port" -U "$BENCH_USER" \
      -c "$BENCH_CLIENTS" -j "$BENCH_JOBS" -S -C -T "$BENCH_LOGIN_JIT_WARMUP" "$BENCH_DB" \
      >/dev/null 2>&1 || true
  done
  for round in $(seq 1 "$BENCH_ROUNDS"); do
    log "==> logins round $round/$BENCH_ROUNDS (${BENCH_LOGIN_WARMUP}s warm-up + ${BENCH_SECONDS}s each)"
    measure_login session pgbouncer "$PGBOUNCER_POOLED_PORT"
    measure_login session pgfence "$PGFENCE_POOLED_PORT"
    measure_login session node-floor "$NODE_FLOOR_PORT"
    measure_login transaction pgbouncer "$PGBOUNCER_TRANSACTION_PORT"
    measure_login transaction pgfence "$PGFENCE_TRANSACTION_PORT"
    PGSSLMODE=require measure_login 'session, TLS' pgbouncer "$PGBOUNCER_LOGIN_TLS_PORT"
    PGSSLMODE=require measure_login 'session, TLS' pgfence "$PGFENCE_LOGIN_TLS_PORT"
    PGSSLMODE=require measure_login 'transaction, TLS' pgbouncer "$PGBOUNCER_TRANSACTION_TLS_PORT"
    PGSSLMODE=require measure_login 'transaction, TLS' pgfence "$PGFENCE_TRANSACTION_TLS_PORT"
    measure_login 'session, plaintext' pgbouncer "$PGBOUNCER_PLAIN_PORT"
    measure_login 'session, plaintext' pgfence "$PGFENCE_PLAIN_PORT"
    measure_login 'none (no pool)' direct "$PG_PORT"
    measure_login 'none (no pool)' pgfence "$PGFENCE_PORT"
  done
}

# Every write measurement starts from the same table state: dead rows vacuumed (the server may
# run without autovacuum) and a fresh checkpoint (the first write to each page after one logs the
# whole page, so TPS climbs until the pages are written once; the warm-up absorbs that climb).
reset_table_state() {
  psql -X -q -h "$PG_HOST" -p "$PG_PORT" -U "$BENCH_USER" -d "$1" \
    -c 'VACUUM pgbench_accounts' -c 'CHECKPOINT'
}

run_fenced_writes() {
  local round token mode target port db
  for round in $(seq 1 "$BENCH_ROUNDS"); do
    log "==> fenced writes round $round/$BENCH_ROUNDS (${BENCH_WARMUP}s warm-up + ${BENCH_SECONDS}s each)"
    for token in set comment; do
      for mode in simple prepared; do
        local script=(-s "$BENCH_SCALE" -M "$mode" -f "$BENCH_DIR/fenced-write-$token.sql")
        for target in unfenced fenced; do
          port=$PGFENCE_PORT db=$BENCH_DB
          [[ $target == fenced ]] && port=$PGFENCE_FENCED_PORT db=$BENCH_FENCED_DB
          reset_table_state "$db"
          MEASURE_DB=$db measure fenced "$token $mode" "$target" "$port" "${script[@]}"
        done
      done
    done
  done
}

# The fenced pgfence writes a database of its own where migrate installed the pgfence schema,
# the fence column and the fence triggers on pgbench_accounts: the unfenced runs write a table
# with none of them.
start_fenced_pgfence() {
  local config="$WORK_DIR/fenced-migrate.yaml"
  printf 'fencing: { tables: [{ name: pgbench_accounts }] }\n' >"$config"
  prepare_database "$BENCH_FENCED_DB"
  log '==> pgfence migrate on the fenced bench database'
  node dist/cli/main.js migrate --config "$config" \
    --database-url "postgres://$BENCH_USER@$PG_HOST:$PG_PORT/$BENCH_FENCED_DB" >&2 || {
    log 'pgfence migrate failed'
    return 0
  }
  PGFENCE_FENCED_PORT=$(free_port)
  start_pgfence "$PGFENCE_FENCED_PORT" '[{ name: pgbench_accounts }]' pgfence-fenced ||
    PGFENCE_FENCED_PORT=
}

# TLS: one leg (upstream), then both legs (PGSSLMODE=require for pgbench).
run_tls() {
  local round mode
  for round in $(seq 1 "$BENCH_ROUNDS"); do
    log "==> TLS round $round/$BENCH_ROUNDS (${BENCH_WARMUP}s warm-up + ${BENCH_SECONDS}s each)"
    for mode in simple prepared; do
      measure tls "upstream $mode" pgbouncer "$PGBOUNCER_TLS_PORT" -S -M "$mode"
      measure tls "upstream $mode" pgfence "$PGFENCE_TLS_PORT" -S -M "$mode"
      PGSSLMODE=require measure tls "both $mode" pgbouncer "$PGBOUNCER_TLS2_PORT" -S -M "$mode"
      PGSSLMODE=require measure tls "both $mode" pgfence "$PGFENCE_TLS2_PORT" -S -M "$mode"
    done
  done
}

# The TLS targets, in front of a cluster of their own with ssl=on (PG_PORT points there while
# they start).
start_tls_targets() {
  local shared_port=$PG_PORT certs="$WORK_DIR/tls-proxy"
  PG_PORT=$(free_port)
  log "==> PostgreSQL with ssl=on on 127.0.0.1:$PG_PORT"
  start_tls_cluster "$PG_PORT"
  prepare_database
  make_cert "$certs"
  local server_tls='server_tls_sslmode = require'
  local client_tls="client_tls_sslmode = require
client_tls_cert_file = $certs/server.crt
client_tls_key_file = $certs/server.key"
  PGBOUNCER_TLS_PORT=$(free_port)
  log "==> pgbouncer (session mode, server TLS) on 127.0.0.1:$PGBOUNCER_TLS_PORT"
  start_pgbouncer "$PGBOUNCER_TLS_PORT" "$BENCH_DB" session trust "$server_tls"
  PGBOUNCER_TLS2_PORT=$(free_port)
  log "==> pgbouncer (session mode, client and server TLS) on 127.0.0.1:$PGBOUNCER_TLS2_PORT"
  start_pgbouncer "$PGBOUNCER_TLS2_PORT" "$BENCH_DB" session trust "$server_tls
$client_tls"
  PGFENCE_TLS_PORT=$(free_port)
  log "==> pgfence (upstream TLS) on 127.0.0.1:$PGFENCE_TLS_PORT"
  start_pgfence "$PGFENCE_TLS_PORT" '[]' pgfence-tls none require || PGFENCE_TLS_PORT=
  PGFENCE_TLS2_PORT=$(free_port)
  log "==> pgfence (client and upstream TLS) on 127.0.0.1:$PGFENCE_TLS2_PORT"
  start_pgfence "$PGFENCE_TLS2_PORT" '[]' pgfence-tls2 none require \
    "tls: { cert: $certs/server.crt, key: $certs/server.key }" || PGFENCE_TLS2_PORT=
  PG_PORT=$shared_port
}

main() {
  command -v pgbench >/dev/null || { log "pgbench not found (PG_BIN=$PG_BIN)"; exit 1; }
  ensure_pgbouncer
  log '==> npm run build'
  npm run --silent build >&2
  USERLIST_SECRET=$(scram_secret)
  if [[ $BENCH_ONLY == tls ]]; then
    start_tls_targets
    run_tls
    print_tls
    return
  fi
  prepare_database
  if [[ $BENCH_ONLY == session ]]; then
    start_pool_targets session PGBOUNCER_POOLED_PORT PGFENCE_POOLED_PORT
    run_pooled pooled "$PGBOUNCER_POOLED_PORT" "$PGFENCE_POOLED_PORT"
    print_session
    return
  fi
  if [[ $BENCH_ONLY == transaction ]]; then
    start_pool_targets transaction PGBOUNCER_TRANSACTION_PORT PGFENCE_TRANSACTION_PORT
    run_pooled transaction "$PGBOUNCER_TRANSACTION_PORT" "$PGFENCE_TRANSACTION_PORT"
    print_transaction
    return
  fi
  if [[ $BENCH_ONLY == login ]]; then
    start_passthrough_pgfence
    start_pool_targets session PGBOUNCER_POOLED_PORT PGFENCE_POOLED_PORT
    start_pool_targets transaction PGBOUNCER_TRANSACTION_PORT PGFENCE_TRANSACTION_PORT
    start_login_targets
    run_logins
    print_logins
    return
  fi
  if [[ $BENCH_ONLY == fenced ]]; then
    start_passthrough_pgfence
    start_fenced_pgfence
    run_fenced_writes
    print_fenced
    return
  fi

  PGBOUNCER_PORT=$(free_port)
  log "==> pgbouncer (session mode) on 127.0.0.1:$PGBOUNCER_PORT"
  start_pgbouncer "$PGBOUNCER_PORT" "$BENCH_DB"

  start_passthrough_pgfence

  start_pool_targets session PGBOUNCER_POOLED_PORT PGFENCE_POOLED_PORT
  start_pool_targets transaction PGBOUNCER_TRANSACTION_PORT PGFENCE_TRANSACTION_PORT
  start_login_targets

  PGFENCE_FENCED_PORT=
  if [[ $BENCH_FENCED == 1 ]]; then start_fenced_pgfence; fi

  if [[ $BENCH_TLS == 1 ]]; then start_tls_targets; fi

  run_passthrough
  run_pooled pooled "$PGBOUNCER_POOLED_PORT" "$PGFENCE_POOLED_PORT"
  run_pooled transaction "$PGBOUNCER_TRANSACTION_PORT" "$PGFENCE_TRANSACTION_PORT"
  run_logins
  if [[ $BENCH_FENCED == 1 ]]; then run_fenced_writes; fi
  if [[ $BENCH_TLS == 1 ]]; then run_tls; fi

  printf '\npgbench -S, %s clients, %s x %ss after %ss warm-up, median TPS\n' \
    "$BENCH_CLIENTS" "$BENCH_ROUNDS" "$BENCH_SECONDS" "$BENCH_WARMUP"
  summarize passthrough 'direct pgbouncer pgfence' 'pgfence/pgbouncer pgfence/direct'
  print_session
  print_transaction
  print_logins
  if [[ $BENCH_FENCED == 1 ]]; then print_fenced; fi
  if [[ $BENCH_TLS == 1 ]]; then print_tls; fi
}

start_passthrough_pgfence() {
  PGFENCE_PORT=$(free_port)
  log "==> pgfence (no fenced tables) on 127.0.0.1:$PGFENCE_PORT"
  start_pgfence "$PGFENCE_PORT" '[]' pgfence-passthrough || PGFENCE_PORT=
}

print_fenced() {
  printf '\nUPDATE pgbench_accounts (token by SET or comment), %s clients, %s x %ss after %ss warm-up, median TPS\n' \
    "$BENCH_CLIENTS" "$BENCH_ROUNDS" "$BENCH_SECONDS" "$BENCH_WARMUP"
  summarize fenced 'unfenced fenced' 'fenced/unfenced'
}

# PgBouncer and pgfence pooling in mode $1 (session, transaction), both with SCRAM clients; their
# ports go to $2 and $3.
start_pool_targets() {
  local mode=$1 bouncer fence
  bouncer=$(free_port)
  log "==> pgbouncer ($mode mode, SCRAM) on 127.0.0.1:$bouncer"
  start_pgbouncer "$bouncer" "$BENCH_DB" "$mode" scram-sha-256
  fence=$(free_port)
  log "==> pgfence ($mode pooling, SCRAM) on 127.0.0.1:$fence"
  start_pgfence "$fence" '[]' "pgfence-$mode" "$mode" || fence=
  printf -v "$2" '%s' "$bouncer"
  printf -v "$3" '%s' "$fence"
}

# A PgBouncer and a pgfence pool in mode $1 that take client TLS only, with the certificate in
# $2 (the upstream leg plain); their ports go into the variables named $3 and $4.
start_tls_login_pair() {
  local mode=$1 certs=$2 bouncer fence
  bouncer=$(free_port)
  log "==> pgbouncer ($mode mode, SCRAM, client TLS) on 127.0.0.1:$bouncer"
  start_pgbouncer "$bouncer" "$BENCH_DB" "$mode" scram-sha-256 "client_tls_sslmode = require
client_tls_cert_file = $certs/server.crt
client_tls_key_file = $certs/server.key"
  fence=$(free_port)
  log "==> pgfence ($mode pooling, SCRAM, client TLS) on 127.0.0.1:$fence"
  start_pgfence "$fence" '[]' "pgfence-login-tls-$mode" "$mode" disable \
    "tls: { cert: $certs/server.crt, key: $certs/server.key }" || fence=
  printf -v "$3" '%s' "$bouncer"
  printf -v "$4" '%s' "$fence"
}

# Pools for the logins table beyond the pooled ones: TLS from the client in both pool modes, and
# a session pool with userlists holding the plaintext password.
start_login_targets() {
  local certs="$WORK_DIR/tls-login"
  make_cert "$certs"
  start_tls_login_pair session "$certs" PGBOUNCER_LOGIN_TLS_PORT PGFENCE_LOGIN_TLS_PORT
  start_tls_login_pair transaction "$certs" PGBOUNCER_TRANSACTION_TLS_PORT \
    PGFENCE_TRANSACTION_TLS_PORT
  local scram_secret=$USERLIST_SECRET
  local USERLIST_SECRET=$BENCH_PASSWORD
  PGBOUNCER_PLAIN_PORT=$(free_port)
  log "==> pgbouncer (session mode, plaintext userlist) on 127.0.0.1:$PGBOUNCER_PLAIN_PORT"
  start_pgbouncer "$PGBOUNCER_PLAIN_PORT" "$BENCH_DB" session scram-sha-256
  PGFENCE_PLAIN_PORT=$(free_port)
  log "==> pgfence (session pooling, plaintext userlist) on 127.0.0.1:$PGFENCE_PLAIN_PORT"
  start_pgfence "$PGFENCE_PLAIN_PORT" '[]' pgfence-plain session || PGFENCE_PLAIN_PORT=
  NODE_FLOOR_PORT=$(free_port)
  log "==> Node's floor (bench/login-floor.mjs: SCRAM, then answers from memory) on 127.0.0.1:$NODE_FLOOR_PORT"
  setsid node "$BENCH_DIR/login-floor.mjs" "$NODE_FLOOR_PORT" "$scram_secret" \
    >"$WORK_DIR/login-floor.log" 2>&1 &
  STARTED_PIDS+=($!)
  PROXY_PID[$NODE_FLOOR_PORT]=$!
  wait_for_postgres "$NODE_FLOOR_PORT" "$BENCH_DB" || NODE_FLOOR_PORT=
}

print_logins() {
  printf '\npgbench -S -C (a new connection per transaction; SCRAM secrets in both userlists unless marked), %s clients, %s x %ss after %ss warm-up, median TPS and proxy CPU ms per login\n' \
    "$BENCH_CLIENTS" "$BENCH_ROUNDS" "$BENCH_SECONDS" "$BENCH_LOGIN_WARMUP"
  summarize login 'direct pgbouncer pgfence node-floor' 'pgfence/pgbouncer node-floor/pgbouncer' cpu
}

print_session() {
  printf '\npgbench -S through session pools (SCRAM clients), %s clients, %s x %ss after %ss warm-up, median TPS\n' \
    "$BENCH_CLIENTS" "$BENCH_ROUNDS" "$BENCH_SECONDS" "$BENCH_WARMUP"
  summarize pooled 'pgbouncer pgfence' 'pgfence/pgbouncer'
}

print_transaction() {
  printf '\npgbench -S through transaction pools (SCRAM clients, pool size 20), %s clients, %s x %ss after %ss warm-up, median TPS\n' \
    "$BENCH_CLIENTS" "$BENCH_ROUNDS" "$BENCH_SECONDS" "$BENCH_WARMUP"
  summarize transaction 'pgbouncer pgfence' 'pgfence/pgbouncer'
}

print_tls() {
  printf '\npgbench -S over TLS (upstream: server leg only; both: pgbench sslmode=require too), %s clients, median TPS\n' \
    "$BENCH_CLIENTS"
  summarize tls 'pgbouncer pgfence' 'pgfence/pgbouncer'
}

main "$@"
