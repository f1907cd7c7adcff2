"""Drives Shepherd's MCP server with the official Python MCP SDK, over stdio
(`shepherd mcp`) and Streamable HTTP (`/mcp`), against a real server (SQLite,
the demo agent of examples/shepherd.toml) that this script starts, restarts
and stops.

Usage: mcp_client_test.py PATH/TO/shepherd   (run from the repository root)
"""

import contextlib
import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import warnings

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

BIN = os.path.abspath(sys.argv[1])
TOKEN = "mcp-test-token-0123456789"
TOOLS = {
    "list_workers", "worker_events", "submit_task", "list_tasks", "get_task", "cancel_task",
    "wait_for_task", "list_runs", "get_run", "get_transcript", "send_message",
    "cancel_conversation", "list_sessions", "list_input_requests", "answer_input_request",
}
DESTRUCTIVE = {"cancel_task", "cancel_conversation", "answer_input_request"}
READ_ONLY = TOOLS - DESTRUCTIVE - {"submit_task", "send_message"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A real `shepherd serve` on a free port, with a token and the demo agent."""

    def __init__(self, data_dir):
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = None

    def start(self):
        env = dict(os.environ)
        env.update({
            "SHEPHERD_CONFIG": "examples/shepherd.toml",
            "SHEPHERD_LISTEN": f"127.0.0.1:{self.port}",
            "SHEPHERD_DATA_DIR": self.data_dir,
            "SHEPHERD_AUTH_TOKEN": TOKEN,
            "SHEPHERD_LOG": "warn",
            "DEMO_AGENT_PAUSE": "0.05",
        })
        self.log = open(os.path.join(self.data_dir, "server.log"), "ab")
        self.proc = subprocess.Popen([BIN, "serve"], env=env, stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, "server exited; see server.log"
            try:
                with urllib.request.urlopen(self.url + "/readyz", timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("server did not become ready")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def rest(self, method, path, body=None, token=TOKEN, headers=None):
        """Calls the REST API; returns (status, json)."""
        h = {"content-type": "application/json"} if body is not None else {}
        if token:
            h["authorization"] = f"Bearer {token}"
        h.update(headers or {})
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                raw = r.read()
                return r.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw)
            except ValueError:
                return e.code, raw.decode(errors="replace")

    def ok(self, method, path, body=None, token=TOKEN):
        status, b = self.rest(method, path, body, token)
        assert 200 <= status < 300, f"{method} {path}: {status} {b}"
        return b


async def eventually(check, what, timeout=20):
    deadline = time.monotonic() + timeout
    while True:
        v = check()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await anyio.sleep(0.05)


class Notes:
    """Collects server notifications (resources/updated)."""

    def __init__(self):
        self.updated = []

    async def __call__(self, message):
        if isinstance(message, types.ResourceUpdatedNotification):
            self.updated.append(message.params.uri)


@contextlib.asynccontextmanager
async def stdio_session(server, notes, **env):
    params = StdioServerParameters(
        command=BIN, args=["mcp", "--server", server.url], env={"SHEPHERD_TOKEN": TOKEN, **env}
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, message_handler=notes) as s:
            await s.initialize()
            yield s


@contextlib.asynccontextmanager
async def http_session(server, notes, token=TOKEN):
    client = httpx2.AsyncClient(
        headers={"authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=300)
    )
    async with client:
        async with streamable_http_client(server.url + "/mcp", http_client=client) as (read, write):
            async with ClientSession(read, write, message_handler=notes) as s:
                await s.initialize()
                yield s


async def call(s, name, **args):
    r = await s.call_tool(name, args)
    assert not r.is_error, f"{name}({args}) failed: {r.content}"
    assert r.structured_content is not None, f"{name}: no structuredContent"
    # The text content carries the same answer.
    assert json.loads(r.content[0].text) == r.structured_content, name
    return r.structured_content


async def tool_error(s, name, **args):
    r = await s.call_tool(name, args)
    assert r.is_error, f"{name}({args}) should fail: {r.structured_content}"
    return r.structured_content["error"]["code"]


async def check_tools(s):
    tools = (await s.list_tools()).tools
    by_name = {t.name: t for t in tools}
    assert set(by_name) == TOOLS, sorted(by_name)
    for t in tools:
        assert t.input_schema["type"] == "object", t.name
        assert t.output_schema and t.output_schema["type"] == "object", t.name
        a = t.annotations
        assert a.read_only_hint == (t.name in READ_ONLY), t.name
        assert a.destructive_hint == (t.name in DESTRUCTIVE), t.name
    ev = by_name["worker_events"]
    for p in ["since", "limit", "include_snapshot", "include_summary",
              "stale_threshold_minutes", "project_filter"]:
        assert p in ev.input_schema["properties"], p
    for p in ["events", "count", "next_cursor", "summary", "snapshot"]:
        assert p in ev.output_schema["properties"], p
    send = by_name["send_message"]
    assert {"conversation_id", "text", "multitask"} <= set(send.input_schema["properties"])
    assert {"message", "conversation"} <= set(send.output_schema["properties"])
    cancel = by_name["cancel_conversation"]
    assert {"conversation_id", "reason"} <= set(cancel.input_schema["properties"])
    assert {"id", "state"} <= set(cancel.output_schema["properties"])
    lw = by_name["list_workers"]
    assert {"include_closed", "project_filter"} <= set(lw.input_schema["properties"])


async def check_task_flow(s, server, label):
    """submit_task to the demo agent, wait with progress, transcript == REST."""
    # A draft, dispatched only once the wait has begun: all of the run's
    # progress happens while wait_for_task waits.
    sub = await call(s, "submit_task", title=f"MCP {label}", spec=f"# MCP {label}\nlook around",
                     agent="demo", draft=True)
    vtid = sub["vtid"]
    assert sub["state"] == "draft" and sub["run_id"] is None, sub
    progress = []
    waited = {}

    async def on_progress(p, total, message):
        progress.append((p, message))

    async def wait():
        waited["r"] = await s.call_tool("wait_for_task", {"vtid": vtid, "timeout_seconds": 60},
                                        progress_callback=on_progress)

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait)
        await eventually(lambda: progress, "the first progress notification")
        server.ok("POST", f"/api/v1/tasks/{vtid}/dispatch")
    r = waited["r"]
    assert not r.is_error, r.content
    w = r.structured_content
    assert w["final"] and not w["timed_out"] and w["state"] == "done", w
    assert len(progress) >= 3, f"too few progress notifications while the run ran: {progress}"
    assert all(b[0] > a[0] for a, b in zip(progress, progress[1:])), progress
    run_id = w["run_id"]
    steps, start, pages = [], 0, 0
    while True:
        page = await call(s, "get_transcript", run_id=run_id, start_index=start, max_steps=3)
        pages += 1
        steps += [x["step"] for x in page["steps"]]
        assert [x["index"] for x in page["steps"]] == list(range(start, page["next_index"]))
        start = page["next_index"]
        if not page["has_more"]:
            assert page["complete"], page
            break
    detail = server.ok("GET", f"/api/agents/workers/detail?worker_id={run_id}")
    assert detail["transcript"] and steps == detail["transcript"], "get_transcript differs from REST"
    assert pages > 1, "the demo transcript should need several pages of 3"
    run = await call(s, "get_run", run_id=run_id, include_transcript=True)
    assert run["transcript"] == detail["transcript"] and run["status"] == "done"
    task = await call(s, "get_task", vtid=vtid)
    assert task["state"] == "done" and task["claims"], task
    listed = await call(s, "list_tasks", agent_id="demo")
    assert vtid in [t["vtid"] for t in listed["tasks"]]
    runs = await call(s, "list_runs", agent_id="demo")
    assert run_id in [x["id"] for x in runs["workers"]]
    # The transcript as a resource.
    res = await s.read_resource(f"shepherd://runs/{run_id}/transcript")
    body = json.loads(res.contents[0].text)
    assert [x["step"] for x in body["steps"]] == detail["transcript"]
    # Cancelling a finished task is the API's conflict, as a tool error.
    assert await tool_error(s, "cancel_task", vtid=vtid) == "task_finished"
    # An agent nobody declares is refused as a likely typo...
    assert await tool_error(s, "submit_task", title="typo", agent="nobody") == "unknown_agent"
    # ...unless it is an outside worker's. Nobody takes it: the wait ends at
    # its timeout, not final.
    stuck = await call(s, "submit_task", title="for nobody", agent="nobody", external=True)
    t = time.monotonic()
    w = await call(s, "wait_for_task", vtid=stuck["vtid"], timeout_seconds=1)
    assert w["timed_out"] and not w["final"] and w["state"] == "pending", w
    assert time.monotonic() - t < 10
    await call(s, "cancel_task", vtid=stuck["vtid"])
    # A draft can be cancelled.
    d = await call(s, "submit_task", title="draft", draft=True)
    c = await call(s, "cancel_task", vtid=d["vtid"], reason="test")
    assert c["cancelled"] and c["task"]["state"] == "cancelled"


async def check_sessions(s, server, label):
    """list_sessions shows a session made through REST, with its tab."""
    with tempfile.TemporaryDirectory(prefix=f"shepherd-mcp-ws-{label}-") as where:
        made = server.ok("POST", "/api/v1/sessions", {"name": f"mcp {label}", "location_path": where})
        tab = server.ok("POST", f"/api/v1/sessions/{made['id']}/workers", {"type": "git-diff"})
        listed = await call(s, "list_sessions")
        assert listed["count"] == len(listed["sessions"]), listed
        mine = [x for x in listed["sessions"] if x["id"] == made["id"]]
        assert len(mine) == 1 and mine[0]["location_path"] == where, listed
        assert [w["id"] for w in mine[0]["workers"]] == [tab["id"]], mine
        assert mine[0]["workers"][0]["type"] == "git-diff", mine
        assert await tool_error(s, "list_sessions", nope=1) == "invalid_arguments"
        server.ok("DELETE", f"/api/v1/sessions/{made['id']}")


async def check_conversation(s, server, label):
    """send_message and cancel_conversation on a resource of the demo agent."""
    rid = f"mcp-{label}"
    server.ok("POST", "/api/v1/resources", {"id": rid, "name": f"MCP {label}", "agent_id": "demo"})
    cid = server.ok("POST", f"/api/v1/resources/{rid}/conversations")["id"]

    def conversation():
        return server.ok("GET", f"/api/v1/conversations/{cid}")

    sent = await call(s, "send_message", conversation_id=cid, text="look around")
    assert sent["message"]["ordinal"] == 1 and sent["message"]["status"] == "sent", sent
    assert sent["message"]["conversation_id"] == cid and sent["message"]["text"] == "look around"
    assert sent["conversation"]["state"] == "processing", sent
    # A second message while the reply runs is refused (multitask defaults to reject).
    assert await tool_error(s, "send_message", conversation_id=cid, text="again") == "conversation_busy"
    c = await call(s, "cancel_conversation", conversation_id=cid, reason="enough")
    assert c["id"] == cid and c["state"] in ("cancelled", "idle"), c
    await eventually(lambda: conversation()["state"] == "idle", "the cancelled reply to end")
    task = server.ok("GET", f"/api/v1/tasks/{sent['message']['task_id']}")
    assert task["state"] == "cancelled", task
    assert all(m["status"] != "running" for m in conversation()["messages"])
    assert await tool_error(s, "cancel_conversation", conversation_id=cid) == "conversation_idle"
    # The next message is answered to the end.
    sent = await call(s, "send_message", conversation_id=cid, text="now finish", multitask="enqueue")
    assert sent["message"]["ordinal"] == 2, sent
    await eventually(lambda: conversation()["state"] == "idle", "the reply to end", timeout=60)
    replies = [m for m in conversation()["messages"] if m["role"] == "agent"]
    assert replies[-1]["status"] == "done" and replies[-1]["text"], replies[-1]
    # Refusals carry the REST API's codes.
    assert await tool_error(s, "send_message", conversation_id="nope", text="hi") == "conversation_not_found"
    assert await tool_error(s, "cancel_conversation", conversation_id="nope") == "conversation_not_found"
    assert await tool_error(s, "send_message", conversation_id=cid, text="") == "invalid_text"
    assert await tool_error(s, "send_message", conversation_id=cid, text="hi",
                            multitask="sometimes") == "invalid_arguments"
    assert await tool_error(s, "send_message", conversation_id=cid) == "invalid_arguments"


async def check_capped_transcript(server, notes):
    """With a small cap, pages stay under it and still cover every step."""
    CAP = 300
    run_id = server.ok("GET", "/api/agents/workers?agent_id=demo&status=done&limit=1")["workers"][0]["id"]
    rest = server.ok("GET", f"/api/agents/workers/detail?worker_id={run_id}")["transcript"]
    async with stdio_session(server, notes, SHEPHERD_MCP_MAX_ANSWER_BYTES=str(CAP)) as s:
        got, start = [], 0
        while True:
            page = await call(s, "get_transcript", run_id=run_id, start_index=start, max_steps=1000)
            size = sum(len(json.dumps(x["step"], separators=(",", ":"))) for x in page["steps"]
                       if x["step"] is not None)
            assert size <= CAP and page["steps"], page
            got += page["steps"]
            start = page["next_index"]
            if not page["has_more"]:
                break
    assert [x["index"] for x in got] == list(range(len(rest)))
    assert len(json.dumps(rest)) > 3 * CAP, "the demo transcript should need several capped pages"
    for x, step in zip(got, rest):
        if x["step"] is None:
            assert x["omitted_bytes"] > CAP
        else:
            assert x["step"] == step


async def check_errors(s):
    assert await tool_error(s, "worker_events", since="not a time") == "invalid_since"
    assert await tool_error(s, "worker_events", limit=0) == "invalid_limit"
    assert await tool_error(s, "list_tasks", limit="many") == "invalid_arguments"
    assert await tool_error(s, "get_task", vtid="VTID-99999") == "task_not_found"
    assert await tool_error(s, "submit_task", spec="no title") == "invalid_arguments"
    assert await tool_error(s, "get_transcript", run_id="nope") == "run_not_found"
    assert await tool_error(s, "get_transcript", run_id="nope", max_steps=0) == "invalid_limit"
    assert await tool_error(s, "wait_for_task", vtid="VTID-99999", timeout_seconds=-1) == "invalid_timeout"
    assert await tool_error(s, "list_workers", bogus=True) == "invalid_arguments"
    assert await tool_error(s, "answer_input_request", id="nope", decision="allow") == "input_request_not_found"
    assert await tool_error(s, "answer_input_request", id="nope", decision="maybe") == "invalid_arguments"
    assert await tool_error(s, "list_input_requests", state="waiting") == "invalid_state"
    pending = await s.call_tool("list_input_requests", {})
    assert not pending.is_error and pending.structured_content["requests"] == [], pending
    try:
        await s.call_tool("no_such_tool", {})
        raise AssertionError("an unknown tool must be a JSON-RPC error")
    except MCPError as e:
        assert e.error.code == -32602, e.error


def check_http_refusals(server):
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"}}}
    accept = {"accept": "application/json, text/event-stream"}
    status, body = server.rest("POST", "/mcp", init, token=None, headers=accept)
    assert status == 401 and body["error"]["code"] == "unauthorized", (status, body)
    status, body = server.rest("POST", "/mcp", init, headers={**accept, "origin": "https://evil.example"})
    assert status == 403 and body["error"]["code"] == "origin_not_allowed", (status, body)
    # Malformed JSON and non-JSON-RPC bodies are JSON-RPC errors.
    for raw, code in ((b"{not json", -32700), (b'{"hello": "world"}', -32600)):
        req = urllib.request.Request(server.url + "/mcp", data=raw, method="POST", headers={
            **accept, "content-type": "application/json", "authorization": f"Bearer {TOKEN}"})
        try:
            urllib.request.urlopen(req, timeout=10)
            raise AssertionError(f"{raw!r} was accepted")
        except urllib.error.HTTPError as e:
            body = json.loads(e.read())
            assert e.code == 400 and body["error"]["code"] == code, (e.code, body)


def register(server, worker_id, project):
    return server.ok("POST", "/api/v1/worker/orchestrator/register", {
        "worker_id": worker_id, "agent_id": "manual", "capabilities": ["manual"],
        "name": worker_id, "project_path": project, "session_id": f"sess-{worker_id}",
        "terminal_id": f"term-{worker_id}", "max_concurrent": 1})


def claim(server, worker, title):
    t = server.ok("POST", "/api/v1/tasks", {"title": title, "agent_id": "manual", "capabilities": ["manual"]})
    c = server.ok("POST", f"/api/v1/worker/orchestrator/tasks/{t['vtid']}/claim", {},
                  token=worker["worker_token"])
    return c


async def check_workers(server, data_dir, notes):
    a = register(server, "mcp-worker-alpha", "/work/alpha")
    b = register(server, "mcp-worker-beta", "/work/beta")
    ca = claim(server, a, "alpha work")
    claim(server, b, "beta work")
    # Subscribing to a running transcript: each appended step is announced.
    async with http_session(server, notes) as s:
        uri = f"shepherd://runs/{ca['run_id']}/transcript"
        with warnings.catch_warnings():
            # The legacy (pre-2026-07-28) subscription, which this server speaks.
            warnings.simplefilter("ignore")
            await s.subscribe_resource(uri)
        for i in range(2):
            server.ok("POST", f"/api/v1/runs/{ca['run_id']}/steps", {
                "claim_token": ca["claim_token"], "start_index": i,
                "steps": [{"type": "action", "content": [{"type": "text", "text": f"step {i}"}]}]},
                token=a["worker_token"])
            await eventually(lambda: notes.updated.count(uri) > i, f"resources/updated #{i + 1}")
        res = await s.read_resource(uri)
        assert len(json.loads(res.contents[0].text)["steps"]) == 2
    # Another worker may not read it: an authorisation error, not "internal".
    async with http_session(server, notes, token=b["worker_token"]) as s:
        try:
            await s.read_resource(uri)
            raise AssertionError("a worker read another worker's transcript")
        except MCPError as e:
            assert e.error.code == -32001, e.error
            assert e.error.data["code"] in ("forbidden", "not_your_worker"), e.error.data

    # Restart; alpha is made stale on purpose (its last activity 30 min ago).
    server.stop()
    db = sqlite3.connect(os.path.join(data_dir, "shepherd.db"))
    old = int(time.time() * 1000) - 30 * 60 * 1000
    db.execute("UPDATE workers SET last_activity_at = ? WHERE id = ?", (old, a["worker_id"]))
    db.commit()
    db.close()
    server.start()

    async with stdio_session(server, notes) as s:
        ws = await call(s, "list_workers")
        by_id = {w["worker_id"]: w for w in ws["workers"]}
        assert ws["count"] == len(ws["workers"])
        for wid in (a["worker_id"], b["worker_id"]):
            w = by_id[wid]
            assert w["source"] == "event_log" and w["recovered_at"], w
            assert w["event_state"] == "active" and w["status"] == "busy", w
            assert w["session_id"] == f"sess-{wid}" and w["terminal_id"] == f"term-{wid}"
            assert w["agent_type"] == "manual" and w["last_event_ts"], w
        alpha_only = await call(s, "list_workers", project_filter="ALPHA")
        assert [w["worker_id"] for w in alpha_only["workers"]] == [a["worker_id"]]

        ev = await call(s, "worker_events", include_summary=True, include_snapshot=True)
        assert ev["summary"]["stuck"] == [a["worker_id"]], ev["summary"]
        assert ev["snapshot"] and ev["snapshot"]["data"]["workers"], ev["snapshot"]
        loose = await call(s, "worker_events", include_summary=True, stale_threshold_minutes=60)
        assert loose["summary"]["stuck"] == [], loose["summary"]

        # Paging with next_cursor: every event exactly once.
        everything = await call(s, "worker_events", since="0", limit=10000)
        assert not everything["has_more"] and everything["count"] > 5
        ids, cursor = [], "0"
        while True:
            page = await call(s, "worker_events", since=cursor, limit=2)
            ids += [e["id"] for e in page["events"]]
            cursor = page["next_cursor"]
            if not page["has_more"]:
                break
        assert ids == [e["id"] for e in everything["events"]], "paging lost or repeated events"
        assert len(set(ids)) == len(ids)
        # An ISO 8601 `since` (the worker registry contract): the events at or after that time.
        middle = everything["events"][len(everything["events"]) // 2]
        since_ts = await call(s, "worker_events", since=middle["ts"], limit=10000)
        assert middle["id"] in [e["id"] for e in since_ts["events"]]
        assert [e["id"] for e in since_ts["events"]] == [
            e["id"] for e in everything["events"] if e["id"] >= since_ts["events"][0]["id"]]
        types_seen = {e["type"] for e in everything["events"]}
        assert {"worker_started", "worker_active", "snapshot"} <= types_seen, types_seen

        # project_filter: only alpha's events (and fleet snapshots), paged too.
        alpha_ev = await call(s, "worker_events", since="0", limit=2, project_filter="alpha",
                              include_summary=True)
        assert alpha_ev["events"] and all(
            e["worker_id"] in (None, a["worker_id"]) for e in alpha_ev["events"]), alpha_ev
        assert alpha_ev["summary"]["stuck"] == [a["worker_id"]]
        # Cancelling a task a worker holds: the worker is told, the answer says so.
        g = register(server, "mcp-worker-gamma", "/work/gamma")
        cg = claim(server, g, "gamma work")
        c = await call(s, "cancel_task", vtid=cg["vtid"], reason="changed my mind")
        assert not c["cancelled"] and c["pending_worker"]["worker_id"] == g["worker_id"], c
        assert c["pending_worker"]["run_id"] == cg["run_id"]
        beta_ev = await call(s, "worker_events", include_summary=True, project_filter="beta")
        assert beta_ev["summary"]["stuck"] == []
        assert all(e["worker_id"] in (None, b["worker_id"]) for e in beta_ev["events"])


def readme_mcp_configs():
    """The `.mcp.json` blocks of the README, parsed."""
    readme = open(os.path.join(os.path.dirname(__file__), "..", "..", "README.md")).read()
    blocks = re.findall(r"```json\n(.*?)```", readme, re.S)
    configs = [json.loads(b) for b in blocks if '"mcpServers"' in b]
    assert len(configs) == 2, f"expected the stdio and HTTP .mcp.json blocks, found {len(configs)}"
    return [c["mcpServers"]["shepherd"] for c in configs]


def expand(value, server):
    """What Claude Code makes of a config value: ${VAR} from the
    environment; here the test server stands where the README's default is."""
    value = value.replace("${SHEPHERD_TOKEN}", TOKEN)
    return value.replace("http://127.0.0.1:7700", server.url)


async def check_readme_configs(server, notes):
    """Each README `.mcp.json` block describes a server the SDK can use."""
    stdio, http = readme_mcp_configs()
    assert stdio["command"] == "shepherd" and "type" not in stdio, stdio
    params = StdioServerParameters(
        command=BIN,
        args=[expand(a, server) for a in stdio["args"]],
        env={k: expand(v, server) for k, v in stdio["env"].items()},
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write, message_handler=notes) as s:
            await s.initialize()
            await check_tools(s)
    assert http["type"] == "http", http
    headers = {k: expand(v, server) for k, v in http["headers"].items()}
    client = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30))
    async with client:
        async with streamable_http_client(expand(http["url"], server), http_client=client) as (
            read,
            write,
        ):
            async with ClientSession(read, write, message_handler=notes) as s:
                await s.initialize()
                await check_tools(s)


async def main():
    with tempfile.TemporaryDirectory(prefix="shepherd-mcp-") as data_dir:
        server = Server(data_dir)
        server.start()
        try:
            notes = Notes()
            check_http_refusals(server)
            await check_readme_configs(server, notes)
            print("ok: the README's .mcp.json blocks")
            for label, session in (("stdio", stdio_session), ("http", http_session)):
                async with session(server, notes) as s:
                    await check_tools(s)
                    await check_task_flow(s, server, label)
                    await check_conversation(s, server, label)
                    await check_sessions(s, server, label)
                    await check_errors(s)
                print(f"ok: {label}")
            await check_capped_transcript(server, notes)
            print("ok: capped transcript")
            await check_workers(server, data_dir, notes)
            print("ok: workers, recovery, worker_events, subscriptions")
        except BaseException:
            sys.stderr.write(open(os.path.join(data_dir, "server.log"), errors="replace").read()[-4000:])
            raise
        finally:
            server.stop()


if __name__ == "__main__":
    anyio.run(main)
