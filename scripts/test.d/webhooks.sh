#!/usr/bin/env bash
# Webhook deliveries of a real `shepherd serve`, verified with the
# Standard Webhooks reference library (`standardwebhooks` from npm, locked
# in tests/webhooks), so the signatures are checked by code other than ours.
set -euo pipefail
cd "$(dirname "$0")/../.."

source scripts/binary.sh
cd tests/webhooks
npm ci --no-audit --no-fund --loglevel=error
node verify.test.mjs "$SHEPHERD_BIN"
