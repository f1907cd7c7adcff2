#!/usr/bin/env bash
# A scripted agent for the browser tests. Its task id is its only argument;
# it moves to each next phase only when the test creates a file named
# <task id>.<phase> in $SCRIPTED_CONTROL_DIR, so a test can watch each state
# without waiting for a fixed time. Writes Shepherd's steps-jsonl format.
set -u
id=$1
dir=${SCRIPTED_CONTROL_DIR:?SCRIPTED_CONTROL_DIR must be set}
cat >/dev/null
wait_for() {
    while [ ! -e "$dir/$id.$1" ]; do sleep 0.05; done
}
echo '{"type":"status","text":"phase one: waiting"}'
echo '{"type":"action","content":[{"type":"text","text":"Starting **phase one**."}]}'
wait_for step2
echo '{"type":"status","text":"phase two: running tool"}'
echo '{"type":"action","content":[{"type":"tool_call","id":"shell:0","name":"shell","args":"{\"command\":\"echo scripted\"}"}]}'
# With <task id>.many: forty more steps at once, then twenty more at .more.
if [ -e "$dir/$id.many" ]; then
    for i in $(seq 1 40); do echo "{\"type\":\"action\",\"content\":[{\"type\":\"text\",\"text\":\"Progress note $i\"}]}"; done
    wait_for more
    for i in $(seq 41 60); do echo "{\"type\":\"action\",\"content\":[{\"type\":\"text\",\"text\":\"Progress note $i\"}]}"; done
fi
wait_for finish
echo '{"type":"tool_result","call_id":"shell:0","name":"shell","text":"scripted output"}'
echo '{"type":"action","content":[{"type":"text","text":"All done: `scripted` finished. <b>not bold</b>"}]}'
if [ -e "$dir/$id.fail" ]; then
    echo "scripted failure" >&2
    exit 3
fi
echo '{"type":"usage","input_tokens":1200,"output_tokens":340,"cost_usd":0.0123}'
echo '{"type":"result","text":"Scripted run **finished**."}'
