#!/usr/bin/env bash
# A small stand-in for a coding agent, for trying Shepherd without an API key.
# It reads the task's spec on stdin, "plans", runs a few real shell commands
# and reports, writing Shepherd's steps-jsonl format on stdout: one transcript
# step per line, plus progress and status lines.
set -u

spec=$(cat)
title=${SHEPHERD_TASK_TITLE:-$(printf '%s\n' "$spec" | head -n 1 | sed 's/^#* *//')}

# JSON string escaping with sed and awk only (no python or jq needed).
esc() {
    sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/\t/\\t/g' -e 's/\r//g' | awk 'NR>1{printf "\\n"} {printf "%s", $0}'
}
say() {
    printf '{"type":"action","content":[{"type":"text","text":"%s"}]}\n' "$(printf '%s' "$1" | esc)"
}
status() {
    printf '{"type":"status","text":"%s"}\n' "$(printf '%s' "$1" | esc)"
}
progress() {
    printf '{"type":"progress","event":"%s","message":"%s"}\n' "$1" "$(printf '%s' "$2" | esc)"
}
n=0
shell() {
    local cmd=$1 id="shell:$n"
    n=$((n + 1))
    status "running: $cmd"
    printf '{"type":"action","content":[{"type":"tool_call","id":"%s","name":"shell","args":"{\\"command\\":\\"%s\\"}"}]}\n' \
        "$id" "$(printf '%s' "$cmd" | esc | esc)"
    local out
    out=$(timeout 20 bash -c "$cmd" 2>&1)
    local code=$?
    [ $code -ne 0 ] && out="$out
(exit code $code)"
    printf '{"type":"tool_result","call_id":"%s","name":"shell","text":"%s"}\n' "$id" "$(printf '%s' "$out" | esc)"
    sleep "${DEMO_AGENT_PAUSE:-0.3}"
}

say "Task: ${title:-untitled}. Plan: look at the workspace, check the toolchain, summarise."
status "planning"
sleep "${DEMO_AGENT_PAUSE:-0.3}"
progress worker.building "inspecting the workspace"
shell "pwd && ls -la | head -n 15"
shell "uname -srm"
shell "git --version 2>/dev/null || echo 'git is not installed'"
shell "df -h . | tail -n 1"
files=$(ls -1 | wc -l | tr -d ' ')
say "Done. The workspace holds $files entries; the toolchain checks are above."
printf '{"type":"result","text":"%s"}\n' "$(printf 'Inspected %s entries in %s and checked the toolchain.' "$files" "$(pwd)" | esc)"
