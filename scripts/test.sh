#!/usr/bin/env bash
# The whole test suite: the Rust tests (both stores), then every suite under
# scripts/test.d/ (browser, MCP client, OpenAPI checks), in name order.
# Each step prints how long it took. Needs PostgreSQL at
# postgres://postgres@127.0.0.1:5432/test (override with SHEPHERD_TEST_PG_URL).
set -euo pipefail
cd "$(dirname "$0")/.."

step() {
    local name=$1
    shift
    local started=$SECONDS
    echo "==> $name"
    "$@"
    echo "<== $name: $((SECONDS - started)) s"
}

# This also builds target/debug/shepherd (the integration tests run it), which
# the suites below drive.
step "cargo test" cargo test --workspace --locked
for suite in scripts/test.d/*.sh; do
    [ -e "$suite" ] || continue
    step "$(basename "$suite" .sh)" bash "$suite"
done
