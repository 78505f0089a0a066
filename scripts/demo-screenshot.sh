#!/usr/bin/env bash
# Runs `pgfence demo --html` and takes a PNG screenshot of the page with headless Chromium
# (Debian's chromium package): docs/demo-timeline.png, shown in the README. Run by hand after
# `npm run build`; needs PostgreSQL (DATABASE_URL, default the local server) for the demo's own
# database, and redis-server and redis-sentinel for the redis-failover round.
#   scripts/demo-screenshot.sh [OUT.png]
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/demo-timeline.png}
chromium=${CHROMIUM:-/usr/bin/chromium}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The broken baseline, the fenced round and the Redis failover: three panels.
node dist/cli/main.js demo --rounds naive,fenced,redis-failover \
  --database-url "${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}" \
  --html "$work/timeline.html"

mkdir -p "$(dirname "$out")"
"$chromium" --headless --no-sandbox --disable-gpu --disable-background-networking \
  --disable-component-update --disable-sync --no-first-run --hide-scrollbars \
  --user-data-dir="$work/profile" --force-device-scale-factor=1 \
  --screenshot="$PWD/$out" --window-size=1280,1370 "file://$work/timeline.html" 2>/dev/null
echo "screenshot written to $out"
