#!/usr/bin/env bash
# OpenAPI: fetch /api/openapi.json from a real server (SQLite, no token on
# loopback), lint it (@redocly/cli), generate TypeScript types from it
# (openapi-typescript) and type-check a small client against them (tsc),
# then fuzz the live server with schemathesis: no 5xx, no answer that
# violates its schema. /api/events never ends, so it is left out.
# npm tools are pinned in scripts/openapi-check/package-lock.json;
# schemathesis in scripts/requirements.txt (venv .ci/venv).
set -euo pipefail
cd "$(dirname "$0")/../.."

venv=.ci/venv
requirements=scripts/requirements.txt
if [ ! -x "$venv/bin/python" ] || ! cmp -s "$requirements" "$venv/requirements.txt"; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
    cp "$requirements" "$venv/requirements.txt"
fi
check=scripts/openapi-check
(cd "$check" && npm ci --no-audit --no-fund --silent)
source scripts/binary.sh

data=$(mktemp -d)
port=$("$venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
SHEPHERD_DATA_DIR="$data" SHEPHERD_LOG=warn "$SHEPHERD_BIN" serve --listen "127.0.0.1:$port" &
server=$!
cleanup() {
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    rm -rf "$data"
}
trap cleanup EXIT
base="http://127.0.0.1:$port"
for _ in $(seq 1 100); do
    curl -fsS "$base/readyz" >/dev/null 2>&1 && break
    sleep 0.1
done

doc="$data/openapi.json"
curl -fsS "$base/api/openapi.json" -o "$doc"
echo "lint"
"$check/node_modules/.bin/redocly" lint --config "$check/redocly.yaml" "$doc"
echo "typescript"
"$check/node_modules/.bin/openapi-typescript" "$doc" -o "$check/schema.d.ts" --silent
(cd "$check" && node_modules/.bin/tsc -p tsconfig.json)
echo "schemathesis"
"$venv/bin/st" run "$base/api/openapi.json" \
    --checks not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance \
    --max-examples "${SHEPHERD_SCHEMATHESIS_EXAMPLES:-25}" \
    --exclude-path /api/events \
    --seed 1 \
    --phases examples,fuzzing,stateful \
    --workers 2 \
    --request-timeout 10 \
    --no-color
