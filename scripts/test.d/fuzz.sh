#!/usr/bin/env bash
# Fuzzing: every libFuzzer target in fuzz/ for 20 s each (scripts/fuzz.sh
# prints executions per target); fails on any crash, naming the reproducer.
set -euo pipefail
cd "$(dirname "$0")/../.."
scripts/fuzz.sh 20
