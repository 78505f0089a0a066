#!/usr/bin/env bash
# pgfence's own CPU per transaction (utime + stime over the measured seconds, divided by the
# transactions pgbench processed) for builds side by side on the same load: a copy of dist/ from
# another commit against this one. Narrower and steadier than bench/run.sh's TPS ratios on a
# shared machine: only pgfence, only the cases asked for, rounds interleaved across builds.
#
#   COMPARE_CASES='session:login none:prepared'  cases, each POOL_MODE:WORKLOAD, where WORKLOAD
#                      is login (-S -C: a new connection per transaction, SCRAM secrets in the
#                      userlist, as the logins table), login-tls (the same with client TLS:
#                      pgbench sslmode=require, pgfence's tls section), simple, extended or
#                      prepared (-S in that protocol), or fenced-set / fenced-comment (bench/run.sh's fenced writes
#                      with -M prepared, in a database each build's migrate prepared)
#   COMPARE_BUILDS='dist /tmp/base/dist'  builds to compare; a copy of dist/ elsewhere needs
#                      build/ and node_modules/ beside it (a worktree of another commit, built);
#                      DIR#WORDS runs DIR's pgfence with node WORDS (dist#--single-threaded-gc)
#   COMPARE_ROUNDS=5 COMPARE_SECONDS=8    interleaved rounds, measured seconds each
#   COMPARE_UPSTREAM_TLS=disable  pgfence's upstream.tls (prefer: the default, which asks a
#                      server without TLS first)
#   COMPARE_WARMUP=15  seconds of each case's load before the first round (V8 optimizes code
#                      that runs once per login only after thousands of logins)
#   PGFENCE_NODE_OPTIONS=--cpu-prof ...   words for node (profiles land in the work directory,
#                      kept when COMPARE_KEEP=1)
# Prints, per case and build, the median µs of CPU per transaction and the rounds' values.
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

COMPARE_CASES=${COMPARE_CASES:-session:login}
COMPARE_BUILDS=${COMPARE_BUILDS:-dist}
COMPARE_ROUNDS=${COMPARE_ROUNDS:-5}
COMPARE_SECONDS=${COMPARE_SECONDS:-8}
COMPARE_WARMUP=${COMPARE_WARMUP:-15}
COMPARE_KEEP=${COMPARE_KEEP:-0}
COMPARE_UPSTREAM_TLS=${COMPARE_UPSTREAM_TLS:-disable}
BENCH_CLIENTS=${BENCH_CLIENTS:-8}
BENCH_JOBS=${BENCH_JOBS:-2}
BENCH_DB=${BENCH_DB:-pgfence_compare_bench}
BENCH_USER=${BENCH_USER:-postgres}
BENCH_PASSWORD=${BENCH_PASSWORD:-bench-secret}
export PGPASSWORD=$BENCH_PASSWORD
PG_HOST=127.0.0.1
PG_PORT=${BENCH_PG_PORT:-5432}

WORK_DIR=$(mktemp -d -t pgfence-compare-XXXXXX)
RESULTS="$WORK_DIR/results.tsv"
cleanup() {
  stop_all
  if [[ $COMPARE_KEEP == 1 ]]; then log "kept $WORK_DIR"; else rm -rf "$WORK_DIR"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A pgbench database $1; with $2 (a build), fenced: that build's migrate installs its schema.
prepare_database() {
  local db=$1 build=${2:-}
  if ! psql -X -q -At -h "$PG_HOST" -p "$PG_PORT" -U "$BENCH_USER" -d "$db" \
    -c 'SELECT 1 FROM pgbench_accounts LIMIT 1' >/dev/null 2>&1; then
    createdb -h "$PG_HOST" -p "$PG_PORT" -U "$BENCH_USER" "$db" 2>/dev/null || true
    pgbench -i -q -s 1 -h "$PG_HOST" -p "$PG_PORT" -U "$BENCH_USER" "$db" >/dev/null 2>&1
    psql -X -q -h "$PG_HOST" -p "$PG_PORT" -U "$BENCH_USER" -d "$db" \
      -c "ALTER DATABASE $db SET synchronous_commit = off"
  fi
  [[ -z $build ]] && return 0
  printf 'fencing: { tables: [{ name: pgbench_accounts }] }\n' >"$WORK_DIR/migrate.yaml"
  node "${build%%#*}/cli/main.js" migrate --config "$WORK_DIR/migrate.yaml" \
    --database-url "postgres://$BENCH_USER@$PG_HOST:$PG_PORT/$db" >/dev/null
}

# The pgbench words of a workload.
workload_args() {
  case $1 in
    login | login-tls) echo "-S -C -M simple" ;;
    simple | extended | prepared) echo "-S -M $1" ;;
    fenced-set | fenced-comment) echo "-s 1 -M prepared -f bench/${1/fenced-/fenced-write-}.sql" ;;
    *) log "unknown workload $1" && return 1 ;;
  esac
}

USERLIST_SECRET=$(scram_secret)
prepare_database "$BENCH_DB"

# The client TLS of login-tls: pgbench's sslmode, pgfence's config.
make_cert "$WORK_DIR/tls"
TLS_CONFIG="tls: { cert: $WORK_DIR/tls/server.crt, key: $WORK_DIR/tls/server.key }"
sslmode() { [[ $1 == *:login-tls ]] && echo require || echo prefer; }

# One pgfence per case and build, each warmed up with its case's load.
declare -A PORT=() DB=() ARGS=()
build_index=0
for build in $COMPARE_BUILDS; do
  build_index=$((build_index + 1))
  for case in $COMPARE_CASES; do
    mode=${case%%:*} workload=${case#*:} key="$case $build" tables='[]' db=$BENCH_DB
    if [[ $workload == fenced-* ]]; then
      db="${BENCH_DB}_fenced_$build_index" tables='[{ name: pgbench_accounts }]'
      prepare_database "$db" "$build"
    fi
    DB[$key]=$db
    ARGS[$key]=$(workload_args "$workload")
    PORT[$key]=$(free_port)
    options=${build#"${build%%#*}"} extra=
    [[ $workload == login-tls ]] && extra=$TLS_CONFIG
    PGFENCE_NODE_OPTIONS="${PGFENCE_NODE_OPTIONS:-} ${options#\#}" \
      PGFENCE_MAIN="${build%%#*}/cli/main.js" start_pgfence "${PORT[$key]}" "$tables" \
      "pgfence-${#PORT[@]}" "$mode" "$COMPARE_UPSTREAM_TLS" "$extra"
    # shellcheck disable=SC2086 # ARGS: pgbench words
    PGSSLMODE=$(sslmode "$case") pgbench -n -h 127.0.0.1 -p "${PORT[$key]}" -U "$BENCH_USER" -c "$BENCH_CLIENTS" \
      -j "$BENCH_JOBS" ${ARGS[$key]} -T "$COMPARE_WARMUP" "$db" >/dev/null 2>&1 || true
  done
done

for round in $(seq 1 "$COMPARE_ROUNDS"); do
  for case in $COMPARE_CASES; do
    for build in $COMPARE_BUILDS; do
      key="$case $build"
      pid=${PROXY_PID[${PORT[$key]}]}
      before=$(cpu_ticks "$pid")
      # shellcheck disable=SC2086 # ARGS: pgbench words
      output=$(PGSSLMODE=$(sslmode "$case") pgbench -n -h 127.0.0.1 -p "${PORT[$key]}" -U "$BENCH_USER" -c "$BENCH_CLIENTS" \
        -j "$BENCH_JOBS" ${ARGS[$key]} -T "$COMPARE_SECONDS" "${DB[$key]}" 2>&1)
      after=$(cpu_ticks "$pid")
      cpu=$(awk -v ticks="$((after - before))" -v hz="$(getconf CLK_TCK)" '
        /actually processed/ { split($NF, n, "/"); transactions = n[1] }
        END { printf "%.1f", (transactions > 0 ? ticks * 1e6 / hz / transactions : 0) }' <<<"$output")
      log "round $round: $case $build $cpu µs/transaction, $(grep -o "actually processed: [0-9/]*" <<<"$output")"
      printf '%s\t%s\t%s\n' "$case" "$build" "$cpu" >>"$RESULTS"
    done
  done
done

for case in $COMPARE_CASES; do
  for build in $COMPARE_BUILDS; do
    values=$(awk -F '\t' -v c="$case" -v b="$build" '$1 == c && $2 == b { print $3 }' "$RESULTS" |
      sort -n)
    median=$(awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }' <<<"$values")
    printf '%-22s %-24s median %8.1f µs/transaction  (%s)\n' "$case" "$build" "$median" \
      "$(tr '\n' ' ' <<<"$values")"
  done
done
