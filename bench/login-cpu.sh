#!/usr/bin/env bash
# pgfence's own CPU per login (utime + stime over the measured seconds, divided by the logins)
# under pgbench -S -C, SCRAM secrets in the userlist as bench/run.sh's logins table has them.
# Quicker and narrower than that table: only pgfence, only the modes asked for, and it can set
# builds side by side (a copy of dist/ from another commit) to compare them on the same load.
#
#   LOGIN_MODES='session transaction none'  pool modes to measure (default: session)
#   LOGIN_BUILDS='dist /tmp/base/dist'      builds to compare; a copy of dist/ elsewhere needs
#                                           build/ and node_modules/ beside it (symlinks do)
#   LOGIN_ROUNDS=5 LOGIN_SECONDS=8          interleaved rounds, measured seconds each
#   LOGIN_JIT_WARMUP=15                     seconds of logins before the first round
#   PGFENCE_NODE_OPTIONS=--cpu-prof ...     words for node (profiles land in the work directory,
#                                           kept when LOGIN_KEEP=1)
# Prints, per mode and build, the median CPU ms per login and the rounds' values.
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

LOGIN_MODES=${LOGIN_MODES:-session}
LOGIN_BUILDS=${LOGIN_BUILDS:-dist}
LOGIN_ROUNDS=${LOGIN_ROUNDS:-5}
LOGIN_SECONDS=${LOGIN_SECONDS:-8}
LOGIN_JIT_WARMUP=${LOGIN_JIT_WARMUP:-15}
LOGIN_KEEP=${LOGIN_KEEP:-0}
BENCH_CLIENTS=${BENCH_CLIENTS:-8}
BENCH_JOBS=${BENCH_JOBS:-2}
BENCH_DB=${BENCH_DB:-pgfence_login_bench}
BENCH_USER=${BENCH_USER:-postgres}
BENCH_PASSWORD=${BENCH_PASSWORD:-bench-secret}
export PGPASSWORD=$BENCH_PASSWORD
PG_HOST=127.0.0.1
PG_PORT=${BENCH_PG_PORT:-5432}

WORK_DIR=$(mktemp -d -t pgfence-login-XXXXXX)
RESULTS="$WORK_DIR/results.tsv"
cleanup() {
  stop_all
  if [[ $LOGIN_KEEP == 1 ]]; then log "kept $WORK_DIR"; else rm -rf "$WORK_DIR"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! psql -X -q -At -h "$PG_HOST" -p "$PG_PORT" -U "$BENCH_USER" -d "$BENCH_DB" \
  -c 'SELECT 1 FROM pgbench_accounts LIMIT 1' >/dev/null 2>&1; then
  createdb -h "$PG_HOST" -p "$PG_PORT" -U "$BENCH_USER" "$BENCH_DB" 2>/dev/null || true
  pgbench -i -q -s 1 -h "$PG_HOST" -p "$PG_PORT" -U "$BENCH_USER" "$BENCH_DB" >/dev/null 2>&1
fi
USERLIST_SECRET=$(scram_secret)

# One pgfence per mode and build, each warmed up with logins.
declare -A PORT=()
for mode in $LOGIN_MODES; do
  for build in $LOGIN_BUILDS; do
    key="$mode $build"
    PORT[$key]=$(free_port)
    PGFENCE_MAIN="$build/cli/main.js" start_pgfence "${PORT[$key]}" '[]' \
      "pgfence-$mode-${#PORT[@]}" "$mode"
    pgbench -n -h 127.0.0.1 -p "${PORT[$key]}" -U "$BENCH_USER" -c "$BENCH_CLIENTS" \
      -j "$BENCH_JOBS" -S -C -T "$LOGIN_JIT_WARMUP" "$BENCH_DB" >/dev/null 2>&1 || true
  done
done

for round in $(seq 1 "$LOGIN_ROUNDS"); do
  for mode in $LOGIN_MODES; do
    for build in $LOGIN_BUILDS; do
      key="$mode $build"
      pid=${PROXY_PID[${PORT[$key]}]}
      before=$(cpu_ticks "$pid")
      output=$(pgbench -n -h 127.0.0.1 -p "${PORT[$key]}" -U "$BENCH_USER" -c "$BENCH_CLIENTS" \
        -j "$BENCH_JOBS" -S -C -T "$LOGIN_SECONDS" "$BENCH_DB" 2>&1)
      after=$(cpu_ticks "$pid")
      cpu=$(awk -v ticks="$((after - before))" -v hz="$(getconf CLK_TCK)" '
        /actually processed/ { split($NF, n, "/"); logins = n[1] }
        END { printf "%.3f", (logins > 0 ? ticks * 1000 / hz / logins : 0) }' <<<"$output")
      log "round $round: $mode $build $cpu ms/login, $(grep -o "actually processed: [0-9/]*" <<<"$output")"
      printf '%s\t%s\t%s\n' "$mode" "$build" "$cpu" >>"$RESULTS"
    done
  done
done

for mode in $LOGIN_MODES; do
  for build in $LOGIN_BUILDS; do
    values=$(awk -F '\t' -v m="$mode" -v b="$build" '$1 == m && $2 == b { print $3 }' "$RESULTS" |
      sort -n)
    median=$(awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }' <<<"$values")
    printf '%-12s %-30s median %.3f ms/login  (%s)\n' "$mode" "$build" "$median" "$(tr '\n' ' ' <<<"$values")"
  done
done
