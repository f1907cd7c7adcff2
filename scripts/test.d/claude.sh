#!/usr/bin/env bash
# The real Claude Code CLI (the locked @anthropic-ai/claude-code from npm)
# asking for permission through Shepherd (`permissions = "ask"`): allow,
# deny with a message, a timeout, and the server killed while a request
# waits. Its model is a scripted stand-in for the Messages API
# (tests/claude/fake-anthropic.mjs); nothing leaves the machine.
set -euo pipefail
cd "$(dirname "$0")/../.."

source scripts/binary.sh
cd tests/claude
npm ci --no-audit --no-fund --loglevel=error
node permissions.test.mjs "$SHEPHERD_BIN"
