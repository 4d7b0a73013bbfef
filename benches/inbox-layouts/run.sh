#!/usr/bin/env bash
# The inbox's table layouts compared at the SQL level, on one PostgreSQL: the
# statements a no-op drain runs per event (claim, then done), without the
# library around them, so that a layout can be judged before it is built.
#
#   eval "$(.ci/start-postgres)"
#   benches/inbox-layouts/run.sh            # 20 000 events, 16 clients, 3 rounds
#
# Layouts, each in a database of its own, filled with the same events
# (bodies of about 600 bytes, no payment intent, all due):
#   today   the migrations in crates/payhook-inbox/migrations/postgres: one row
#           per event, updated by the claim (a heap-only update) and by the done
#           mark (a new row version in each index), plus an attempt record;
#   beside  today's row without the phase and its indexes, so that the done
#           mark too changes no indexed column, and the waiting events' keys
#           in a small table beside it (inserted with the event, deleted by
#           the done mark) that the claims read in due order;
#   split   the same row with its changing columns (state, lease, attempts,
#           due and done times) in a narrow table of their own, one row per
#           event, with the state indexes; the event's body and its other
#           indexes are written once;
#   work    the event records written once, the waiting and running events
#           in a small work table (claimed with a heap-only update, deleted
#           when done) and each done event's attempt appended to a done table;
#   jobs    a bare job table, claimed and deleted (what a job queue such as
#           graphile-worker does per job): the floor, with no record kept.
# Each pgbench client claims 32 due events (`FOR UPDATE SKIP LOCKED`) and
# marks them done, until none is left. Printed per layout: the median
# events/s and the server's CPU per event (the postmaster, its live
# children and the reaped ones), and the fill's CPU per event (one INSERT …
# SELECT, which the drain does not include). Per-intent order, pauses and
# the advisory guards are left out: they cost the same in every layout.
#
# LAYOUT_FILLFACTOR=N sets the events table's fill factor after the
# migrations (today, beside); LAYOUT_SHOW_HOT=1 prints each table's updates
# and how many were heap-only. (A body under ~2 KB cannot be moved out of the
# row: PostgreSQL toasts only rows over its 2 KB threshold, and the
# `toast_tuple_target` storage setting does not lower that threshold.)
set -euo pipefail

: "${PAYHOOK_TEST_DATABASE_URL:?set it first: eval \"\$(.ci/start-postgres)\"}"
: "${PAYHOOK_TEST_PG_DIR:?set by .ci/start-postgres}"
here=$(cd "$(dirname "$0")" && pwd)
migrations="$here/../../crates/payhook-inbox/migrations/postgres"
events=${LAYOUT_EVENTS:-20000}
clients=${LAYOUT_CLIENTS:-16}
rounds=${LAYOUT_ROUNDS:-3}
layouts=${LAYOUT_NAMES:-today beside split work jobs}
batch=${LAYOUT_BATCH:-32}
base="${PAYHOOK_TEST_DATABASE_URL%/*}"
tmp=$(mktemp -d)
export PGOPTIONS="-c client_min_messages=warning"
trap 'rm -rf "$tmp"' EXIT

# CPU seconds of the server: the postmaster with its reaped children, and
# its live children (clock ticks of /proc/PID/stat, fields 14-17).
server_cpu() {
  local master ticks
  master=$(head -n 1 "$PAYHOOK_TEST_PG_DIR/data/postmaster.pid")
  ticks=$(getconf CLK_TCK)
  {
    awk '{ print $14 + $15 + $16 + $17 }' "/proc/$master/stat"
    for stat in /proc/[0-9]*/stat; do
      awk -v m="$master" '$4 == m { print $14 + $15 }' "$stat" 2>/dev/null || true
    done
  } | awk -v t="$ticks" '{ s += $1 } END { printf "%.3f", s / t }'
}

schema() {
  case $1 in
    today | beside)
      for file in "$migrations"/*.sql; do
        sed "s/{pending}/'pending'/g; s/{running}/'running'/g" "$file"
      done
      if [ -n "${LAYOUT_FILLFACTOR:-}" ]; then
        echo "ALTER TABLE payhook_inbox SET (fillfactor = $LAYOUT_FILLFACTOR);"
      fi
      if [ "$1" = beside ]; then
        cat <<'SQL'
DROP INDEX payhook_inbox_waiting, payhook_inbox_phase_received, payhook_inbox_phase_done;
ALTER TABLE payhook_inbox DROP COLUMN phase;
CREATE TABLE payhook_inbox_work (arrival BIGINT PRIMARY KEY, namespace TEXT NOT NULL, phase TEXT NOT NULL,
  due_at BIGINT NOT NULL, received_at BIGINT NOT NULL) WITH (fillfactor = 70);
CREATE INDEX ON payhook_inbox_work (namespace, due_at, arrival) WHERE phase = 'pending';
CREATE INDEX ON payhook_inbox_work (namespace, phase, received_at, arrival);
SQL
      fi
      ;;
    split)
      cat <<'SQL'
CREATE TABLE records (arrival BIGSERIAL PRIMARY KEY, namespace TEXT NOT NULL, event_id TEXT NOT NULL,
  event_type TEXT NOT NULL, intent_id TEXT, created BIGINT NOT NULL, body TEXT NOT NULL,
  received_at BIGINT NOT NULL, trace_context TEXT, source TEXT, UNIQUE (namespace, event_id));
CREATE INDEX ON records (namespace, intent_id, created, arrival);
CREATE INDEX ON records (namespace, received_at, arrival);
CREATE INDEX ON records (namespace, event_type, received_at, arrival);
CREATE TABLE progress (arrival BIGINT PRIMARY KEY, namespace TEXT NOT NULL, state TEXT NOT NULL,
  received_at BIGINT NOT NULL, due_at BIGINT NOT NULL, attempts BIGINT NOT NULL DEFAULT 0,
  lease_token BIGINT, lease_until BIGINT, last_error TEXT, last_attempt_at BIGINT, done_at BIGINT,
  suspect BIGINT NOT NULL DEFAULT 0,
  phase TEXT GENERATED ALWAYS AS (CASE WHEN state = 'running' THEN 'pending' ELSE state END) STORED)
  WITH (fillfactor = 60);
CREATE INDEX ON progress (namespace, due_at, arrival) WHERE phase = 'pending';
CREATE INDEX ON progress (namespace, phase, received_at, arrival);
CREATE INDEX ON progress (namespace, phase, done_at);
CREATE TABLE attempts (arrival BIGINT NOT NULL, namespace TEXT NOT NULL, attempt BIGINT NOT NULL,
  started_at BIGINT NOT NULL, finished_at BIGINT NOT NULL, duration_ms BIGINT NOT NULL,
  outcome TEXT NOT NULL, error TEXT, PRIMARY KEY (arrival, attempt));
CREATE INDEX ON attempts (namespace, finished_at);
SQL
      ;;
    work)
      cat <<'SQL'
CREATE TABLE records (arrival BIGSERIAL PRIMARY KEY, namespace TEXT NOT NULL, event_id TEXT NOT NULL,
  event_type TEXT NOT NULL, intent_id TEXT, created BIGINT NOT NULL, body TEXT NOT NULL,
  received_at BIGINT NOT NULL, state TEXT NOT NULL, trace_context TEXT, source TEXT,
  UNIQUE (namespace, event_id));
CREATE INDEX ON records (namespace, intent_id, created, arrival);
CREATE INDEX ON records (namespace, received_at, arrival);
CREATE INDEX ON records (namespace, event_type, received_at, arrival);
CREATE INDEX ON records (namespace, state, received_at, arrival);
CREATE TABLE work (arrival BIGINT PRIMARY KEY, namespace TEXT NOT NULL, event_type TEXT NOT NULL,
  intent_id TEXT, created BIGINT NOT NULL, due_at BIGINT NOT NULL, state TEXT NOT NULL,
  attempts BIGINT NOT NULL DEFAULT 0, lease_token BIGINT, lease_until BIGINT, last_error TEXT,
  last_attempt_at BIGINT, suspect BIGINT NOT NULL DEFAULT 0) WITH (fillfactor = 70);
CREATE INDEX ON work (namespace, due_at, arrival);
CREATE INDEX ON work (namespace, intent_id, created, arrival) WHERE intent_id IS NOT NULL;
CREATE TABLE done (arrival BIGINT PRIMARY KEY, namespace TEXT NOT NULL, attempt BIGINT NOT NULL,
  started_at BIGINT NOT NULL, done_at BIGINT NOT NULL);
CREATE INDEX ON done (namespace, done_at);
SQL
      ;;
    jobs)
      cat <<'SQL'
CREATE TABLE jobs (id BIGSERIAL PRIMARY KEY, queue_name TEXT, task TEXT NOT NULL, payload TEXT NOT NULL,
  run_at BIGINT NOT NULL, attempts INT NOT NULL DEFAULT 0, locked_by BIGINT, locked_at BIGINT)
  WITH (fillfactor = 70);
CREATE INDEX ON jobs (run_at, id);
SQL
      ;;
  esac
}

# An event body of about 600 bytes, shaped like the service's JSON, its ids
# and text random enough that compression does not shrink it much.
body="'{\"id\":\"evt_' || g || '\",\"object\":\"event\",\"type\":\"payment_intent.succeeded\",\"data\":{\"object\":{\"id\":\"pi_'"
body+=" || md5(g::text) || '\",\"amount\":' || (g * 37 % 100000) || ',\"currency\":\"usdc\",\"status\":\"succeeded\",\"customer\":\"cus_'"
body+=" || md5((g + 1)::text) || '\",\"description\":\"'"
body+=" || md5((g + 2)::text) || md5((g + 3)::text) || md5((g + 4)::text) || md5((g + 5)::text)"
body+=" || md5((g + 6)::text) || md5((g + 7)::text) || md5((g + 8)::text) || md5((g + 9)::text)"
body+=" || md5((g + 10)::text) || md5((g + 11)::text) || md5((g + 12)::text) || md5((g + 13)::text)"
body+=" || '\"}}}'"

fill() {
  local series="FROM generate_series(1, $events) g"
  case $1 in
    today) echo "INSERT INTO payhook_inbox (namespace, event_id, event_type, created, body, received_at, state, due_at)
      SELECT 'bench', 'evt_' || g, 'payment_intent.succeeded', g, $body, g, 'pending', g $series;" ;;
    beside) echo "WITH r AS (INSERT INTO payhook_inbox (namespace, event_id, event_type, created, body, received_at, state, due_at)
      SELECT 'bench', 'evt_' || g, 'payment_intent.succeeded', g, $body, g, 'pending', g $series
      RETURNING arrival, received_at, due_at)
      INSERT INTO payhook_inbox_work SELECT arrival, 'bench', 'pending', due_at, received_at FROM r;" ;;
    split) echo "WITH r AS (INSERT INTO records (namespace, event_id, event_type, created, body, received_at)
      SELECT 'bench', 'evt_' || g, 'payment_intent.succeeded', g, $body, g $series RETURNING arrival, received_at)
      INSERT INTO progress (arrival, namespace, state, received_at, due_at) SELECT arrival, 'bench', 'pending', received_at, received_at FROM r;" ;;
    work) echo "WITH r AS (INSERT INTO records (namespace, event_id, event_type, created, body, received_at, state)
      SELECT 'bench', 'evt_' || g, 'payment_intent.succeeded', g, $body, g, 'open' $series
      RETURNING arrival, event_type, created, received_at)
      INSERT INTO work (arrival, namespace, event_type, created, due_at, state)
      SELECT arrival, 'bench', event_type, created, received_at, 'pending' FROM r;" ;;
    jobs) echo "INSERT INTO jobs (task, payload, run_at) SELECT 'payment_intent.succeeded', $body, g $series;" ;;
  esac
}

# The claim and the done mark of the layouts that update a state in place:
# $1 the table holding the state, $2 what the claim joins to read the body
# (with the condition joining it), $3 the attempts table.
claim_in_place() {
  printf '%s' "WITH picked AS (SELECT arrival FROM $1 WHERE namespace = 'bench' AND phase = 'pending'
        AND state = 'pending' AND due_at <= 9000000000000 ORDER BY due_at, arrival LIMIT $batch FOR UPDATE SKIP LOCKED),
        claimed AS (UPDATE $1 e SET state = 'running', lease_token = :client_id, lease_until = 9000000000000
        FROM picked$2 WHERE e.arrival = picked.arrival RETURNING e.arrival, body)"
}
done_in_place() {
  printf '%s' "WITH marked AS (UPDATE $1 SET state = 'done', done_at = 2, lease_token = NULL, lease_until = NULL,
        last_error = NULL, attempts = 1, last_attempt_at = 1
        WHERE arrival = ANY (ARRAY[:ids]::bigint[]) AND lease_token = :client_id AND state = 'running'
        RETURNING arrival, namespace)
        INSERT INTO $2 (arrival, namespace, attempt, started_at, finished_at, duration_ms, outcome)
        SELECT arrival, namespace, 1, 1, 2, 1, 'done' FROM marked;"
}

# One pgbench transaction: claim up to $batch due events, then mark them done.
cycle() {
  local claim done
  case $1 in
    today)
      claim=$(claim_in_place payhook_inbox "")
      done=$(done_in_place payhook_inbox payhook_inbox_attempts) ;;
    beside)
      claim="WITH picked AS (SELECT e.arrival FROM payhook_inbox_work w JOIN payhook_inbox e ON e.arrival = w.arrival
        WHERE w.namespace = 'bench' AND w.phase = 'pending' AND w.due_at <= 9000000000000 AND e.state = 'pending'
        ORDER BY w.due_at, w.arrival LIMIT $batch FOR UPDATE OF e SKIP LOCKED),
        claimed AS (UPDATE payhook_inbox e SET state = 'running', lease_token = :client_id, lease_until = 9000000000000
        FROM picked WHERE e.arrival = picked.arrival RETURNING e.arrival, body)"
      done=$(done_in_place payhook_inbox payhook_inbox_attempts)
      done="${done/RETURNING arrival, namespace)/RETURNING arrival, namespace),
        left_work AS (DELETE FROM payhook_inbox_work w USING marked WHERE w.arrival = marked.arrival)}" ;;
    split)
      claim=$(claim_in_place progress " JOIN records r ON r.arrival = picked.arrival")
      done=$(done_in_place progress attempts) ;;
    work)
      claim="WITH picked AS (SELECT arrival FROM work WHERE namespace = 'bench' AND state = 'pending'
        AND due_at <= 9000000000000 ORDER BY due_at, arrival LIMIT $batch FOR UPDATE SKIP LOCKED),
        claimed AS (UPDATE work e SET state = 'running', lease_token = :client_id, lease_until = 9000000000000
        FROM picked JOIN records r ON r.arrival = picked.arrival WHERE e.arrival = picked.arrival RETURNING e.arrival, r.body)"
      done="WITH finished AS (DELETE FROM work WHERE arrival = ANY (ARRAY[:ids]::bigint[]) AND lease_token = :client_id
        AND state = 'running' RETURNING arrival, namespace, attempts)
        INSERT INTO done (arrival, namespace, attempt, started_at, done_at)
        SELECT arrival, namespace, attempts + 1, 1, 2 FROM finished;" ;;
    jobs)
      claim="WITH picked AS (SELECT id FROM jobs WHERE run_at <= 9000000000000 AND locked_at IS NULL
        ORDER BY run_at, id LIMIT $batch FOR UPDATE SKIP LOCKED),
        claimed AS (UPDATE jobs j SET locked_by = :client_id, locked_at = 1, attempts = j.attempts + 1
        FROM picked WHERE j.id = picked.id RETURNING j.id AS arrival, j.payload AS body)"
      done="DELETE FROM jobs WHERE id = ANY (ARRAY[:ids]::bigint[]) AND locked_by = :client_id;" ;;
  esac
  printf '%s\nSELECT COALESCE(string_agg(arrival::text, %s), %s) AS ids, sum(length(body)) AS bytes FROM claimed \\gset\n%s\n' \
    "$claim" "','" "'0'" "$done"
}

left() {
  case $1 in
    today) echo "SELECT count(*) FROM payhook_inbox WHERE state <> 'done'" ;;
    beside) echo "SELECT (SELECT count(*) FROM payhook_inbox WHERE state <> 'done') + (SELECT count(*) FROM payhook_inbox_work)" ;;
    split) echo "SELECT count(*) FROM progress WHERE state <> 'done'" ;;
    work) echo "SELECT count(*) FROM work" ;;
    jobs) echo "SELECT count(*) FROM jobs" ;;
  esac
}

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# Enough transactions for every client to find the queue empty at least once.
transactions=$(( events / (batch * clients) + 8 ))
declare -A rates cpus fills
for round in $(seq 1 "$rounds"); do
  for layout in $layouts; do
    db="payhook_layout_${layout}_$$"
    psql "$PAYHOOK_TEST_DATABASE_URL" -qc "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
    url="$base/$db"
    schema "$layout" | psql "$url" -q -v ON_ERROR_STOP=1 >/dev/null
    before=$(server_cpu)
    fill "$layout" | psql "$url" -q -v ON_ERROR_STOP=1
    fill_cpu=$(awk -v a="$before" -v b="$(server_cpu)" -v n="$events" 'BEGIN { printf "%.4f", (b - a) * 1000 / n }')
    psql "$url" -qc "VACUUM ANALYZE" -c "CHECKPOINT"
    cycle "$layout" > "$tmp/cycle.sql"
    before=$(server_cpu)
    start=$(date +%s.%N)
    pgbench -n -c "$clients" -j 2 -t "$transactions" -f "$tmp/cycle.sql" "$url" > "$tmp/pgbench.log" 2>&1 \
      || { cat "$tmp/pgbench.log" >&2; exit 1; }
    end=$(date +%s.%N)
    after=$(server_cpu)
    remaining=$(psql "$url" -tAc "$(left "$layout")")
    [ "$remaining" = 0 ] || { echo "run.sh: $layout left $remaining events undone" >&2; exit 1; }
    rate=$(awk -v s="$start" -v e="$end" -v n="$events" 'BEGIN { printf "%.0f", n / (e - s) }')
    cpu=$(awk -v a="$before" -v b="$after" -v n="$events" 'BEGIN { printf "%.4f", (b - a) * 1000 / n }')
    echo "round $round, $layout: $rate events/s, server CPU-s per 1 000 events: drain $cpu, fill $fill_cpu"
    rates[$layout]+="$rate "
    cpus[$layout]+="$cpu "
    fills[$layout]+="$fill_cpu "
    [ -z "${LAYOUT_SHOW_HOT:-}" ] || psql "$url" -tAc "SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE n_tup_upd > 0"
    psql "$PAYHOOK_TEST_DATABASE_URL" -qc "DROP DATABASE $db WITH (FORCE)"
  done
done
echo "medians of $rounds rounds, $events events, $clients clients, $batch a claim:"
for layout in $layouts; do
  r=$(tr ' ' '\n' <<< "${rates[$layout]}" | grep . | median)
  c=$(tr ' ' '\n' <<< "${cpus[$layout]}" | grep . | median)
  f=$(tr ' ' '\n' <<< "${fills[$layout]}" | grep . | median)
  echo "  $layout: $r events/s, server CPU-s per 1 000 events: drain $c, fill $f"
done
