#!/usr/bin/env bash
# An agent for the Inbox's browser tests that asks a person through
# `shepherd ask` (the real binary, $SHEPHERD_BIN, with the run token the
# runner gives every agent). Its first argument says what it asks, its second
# is its task id; it writes what it was answered and its exit code to
# $ASK_OUT_DIR/<task id>.answer and ends as `shepherd ask` did.
#   question    "Deploy to staging?" with the options yes and no, after a
#               `git status` that the agent's allow rule answers at once
#   text        "Which branch?" with no options (a free-text answer)
#   permission  Bash `rm -rf build`
set -u
mode=$1
id=$2
out=${ASK_OUT_DIR:?ASK_OUT_DIR must be set}
cat >/dev/null
case $mode in
question)
    "$SHEPHERD_BIN" ask --permission Bash --input '{"command":"git status --short"}' >/dev/null
    answer=$("$SHEPHERD_BIN" ask 'Deploy to staging?' --option yes --option no)
    code=$?
    ;;
text)
    answer=$("$SHEPHERD_BIN" ask 'Which branch?')
    code=$?
    ;;
permission)
    answer=$("$SHEPHERD_BIN" ask --permission Bash --input '{"command":"rm -rf build","description":"Clean the build: removes the build directory and everything in it, so that the next deploy starts from a fresh tree with nothing left over from earlier builds"}' 'Clean the build before deploying')
    code=$?
    ;;
*)
    echo "unknown mode $mode" >&2
    exit 2
    ;;
esac
printf '%s exit=%s\n' "$answer" "$code" >"$out/$id.answer.tmp"
mv "$out/$id.answer.tmp" "$out/$id.answer"
echo "{\"type\":\"result\",\"text\":\"Answered: $answer\"}"
exit "$code"
