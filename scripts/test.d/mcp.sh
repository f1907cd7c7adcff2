#!/usr/bin/env bash
# MCP: the official Python SDK (`mcp` on PyPI) drives `shepherd mcp` (stdio)
# and `/mcp` (Streamable HTTP) against a real server it starts (SQLite, the
# demo agent). The SDK lives in .ci/venv, rebuilt when
# scripts/requirements.txt changes.
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
cargo build --locked --quiet -p shepherd
"$venv/bin/python" tests/mcp/mcp_client_test.py target/debug/shepherd
