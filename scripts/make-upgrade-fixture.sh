#!/usr/bin/env bash
# Makes the upgrade fixtures in crates/shepherd/tests/fixtures/v0011: a
# database at schema migration 0011 filled by a real workload, on SQLite and
# on PostgreSQL, and what that shepherd served from it (tasks, runs, their
# steps, the event log), for tests/upgrade.rs to check that every later
# migration keeps it readable. Run once with a shepherd built at the commit
# whose newest migration is 0011 (26927f9); the fixtures are then frozen.
#   scripts/make-upgrade-fixture.sh /path/to/old/shepherd
set -euo pipefail
old=$(realpath "$1")
out=$(cd "$(dirname "$0")/.." && pwd)/crates/shepherd/tests/fixtures/v0011
pg=${SHEPHERD_TEST_PG_URL:-postgres://postgres@127.0.0.1:5432/test}
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/shepherd.toml" <<'TOML'
[agents.echo]
command = ["sh", "-c", "cat > /dev/null; echo reading the spec; echo '{\"type\":\"usage\",\"input_tokens\":10,\"output_tokens\":5}'; echo done"]
TOML

# $1: sqlite|postgres
workload() {
  local kind=$1 data=$work/data-$1
  local env=(SHEPHERD_CONFIG="$work/shepherd.toml" SHEPHERD_DATA_DIR="$data" SHEPHERD_LISTEN=127.0.0.1:0 SHEPHERD_LOG=warn)
  if [ "$kind" = postgres ]; then
    psql "$pg" -qc "DROP SCHEMA IF EXISTS fixture_0011 CASCADE"
    env+=(SHEPHERD_DATABASE_URL="$pg" SHEPHERD_PG_SCHEMA=fixture_0011)
  fi
  env "${env[@]}" "$old" serve > "$work/serve-$kind.log" &
  local pid=$!
  local base=""
  for _ in $(seq 100); do
    base=$(grep -o 'http://[0-9.:]*' "$work/serve-$kind.log" | head -1 || true)
    [ -n "$base" ] && break
    sleep 0.1
  done
  for i in $(seq 1 12); do
    curl -fsS -XPOST "$base/api/v1/tasks" -H 'content-type: application/json' \
      -d "{\"vtid\":\"UP-$i\",\"title\":\"Upgrade $i\",\"spec\":\"# Task $i\",\"agent_id\":\"echo\",\"priority\":$((i % 3))}" > /dev/null
  done
  curl -fsS -XPOST "$base/api/v1/tasks" -H 'content-type: application/json' \
    -d '{"vtid":"UP-DRAFT","title":"Left as a draft","spec":"later","workflow":"simple","dispatch":false}' > /dev/null
  curl -fsS -XPOST "$base/api/v1/tasks" -H 'content-type: application/json' \
    -d '{"vtid":"UP-CANCEL","title":"Cancelled","spec":"no","workflow":"simple"}' > /dev/null
  curl -fsS -XPOST "$base/api/v1/tasks/UP-CANCEL/cancel" -H 'content-type: application/json' -d '{}' > /dev/null
  for _ in $(seq 300); do
    left=$(curl -fsS "$base/api/v1/runs?limit=100" | python3 -c 'import json,sys; r=json.load(sys.stdin)["runs"]; print(len(r) < 12 or any(x["status"]=="running" for x in r))')
    [ "$left" = False ] && break
    sleep 0.2
  done
  python3 - "$base" "$out/expected-$kind.json" <<'PY'
import json, sys, urllib.request
base, path = sys.argv[1], sys.argv[2]
get = lambda p: json.load(urllib.request.urlopen(base + p))
runs = get("/api/v1/runs?limit=100")["runs"]
events, after = [], 0
while True:
    page = get(f"/api/v1/events?after={after}&limit=1000")
    if not page["events"]:
        break
    events += page["events"]
    after = page["next_cursor"]
json.dump({
    "tasks": get("/api/v1/tasks?limit=100")["tasks"],
    "runs": runs,
    "steps": {r["id"]: get(f"/api/v1/runs/{r['id']}/steps") for r in runs},
    "events": events,
}, open(path, "w"), indent=1, sort_keys=True)
PY
  kill "$pid"; wait "$pid" || true
  if [ "$kind" = sqlite ]; then
    rm -f "$out/shepherd.db"
    sqlite3 "$data/shepherd.db" ".backup '$out/shepherd.db'"
  else
    pg_dump --dbname "$pg" --schema fixture_0011 --inserts --no-owner --no-privileges \
      | grep -v '^SET \|^SELECT pg_catalog.set_config\|^--\|^\\' | sed '/^$/N;/^\n$/D' > "$out/postgres.sql"
    psql "$pg" -qc "DROP SCHEMA fixture_0011 CASCADE"
  fi
}
workload sqlite
workload postgres
ls -la "$out"
