// A scripted stand-in for the Anthropic Messages API, for driving the real
// Claude Code CLI in tests. `POST /v1/messages` answers with the next turn
// of a script, streamed as server-sent events the way the API streams them
// (message_start, content blocks with their deltas, message_delta,
// message_stop). Every request body is kept, so a test can read what
// Claude Code sent (a tool_result saying the tool was denied, say).
//
// A script is a list of turns; each turn is `{text?, tool_use?: {name,
// input}, when?}`. The next turn whose `when` matches the request is
// played: `when` is absent (any request), "tool_result_ok" or
// "tool_result_error" (the request's last message carries a tool result
// that succeeded or failed). Requests Claude Code makes besides the
// conversation (titles, topic checks: those without tools) get a short
// text and do not use up the script.

import http from "node:http";

export function startFakeAnthropic(script) {
  const requests = [];
  let next = 0;

  function lastToolResult(body) {
    const last = body.messages?.[body.messages.length - 1];
    if (!last || !Array.isArray(last.content)) return null;
    return last.content.find((c) => c.type === "tool_result") ?? null;
  }

  function pickTurn(body) {
    const result = lastToolResult(body);
    for (let i = next; i < script.length; i++) {
      const want = script[i].when;
      const ok =
        !want ||
        (want === "tool_result_ok" && result && !result.is_error) ||
        (want === "tool_result_error" && result && result.is_error);
      if (ok) {
        next = i + 1;
        return script[i];
      }
    }
    return { text: "Done." };
  }

  function events(turn, model) {
    const out = [];
    const id = `msg_${Math.random().toString(16).slice(2)}`;
    out.push(["message_start", {
      type: "message_start",
      message: {
        id, type: "message", role: "assistant", model, content: [],
        stop_reason: null, stop_sequence: null,
        usage: { input_tokens: 10, output_tokens: 1 },
      },
    }]);
    let index = 0;
    if (turn.text) {
      out.push(["content_block_start", { type: "content_block_start", index, content_block: { type: "text", text: "" } }]);
      out.push(["content_block_delta", { type: "content_block_delta", index, delta: { type: "text_delta", text: turn.text } }]);
      out.push(["content_block_stop", { type: "content_block_stop", index }]);
      index++;
    }
    if (turn.tool_use) {
      const toolId = `toolu_${Math.random().toString(16).slice(2)}`;
      out.push(["content_block_start", {
        type: "content_block_start", index,
        content_block: { type: "tool_use", id: toolId, name: turn.tool_use.name, input: {} },
      }]);
      out.push(["content_block_delta", {
        type: "content_block_delta", index,
        delta: { type: "input_json_delta", partial_json: JSON.stringify(turn.tool_use.input) },
      }]);
      out.push(["content_block_stop", { type: "content_block_stop", index }]);
    }
    out.push(["message_delta", {
      type: "message_delta",
      delta: { stop_reason: turn.tool_use ? "tool_use" : "end_turn", stop_sequence: null },
      usage: { output_tokens: 20 },
    }]);
    out.push(["message_stop", { type: "message_stop" }]);
    return { id, out };
  }

  const server = http.createServer((req, res) => {
    let raw = "";
    req.on("data", (c) => (raw += c));
    req.on("end", () => {
      const path = req.url.split("?")[0];
      if (req.method !== "POST" || !path.endsWith("/v1/messages")) {
        // Token counting, model lists and the like: harmless answers.
        if (path.endsWith("/count_tokens")) {
          res.writeHead(200, { "content-type": "application/json" });
          res.end(JSON.stringify({ input_tokens: 10 }));
          return;
        }
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ data: [] }));
        return;
      }
      let body;
      try {
        body = JSON.parse(raw);
      } catch {
        res.writeHead(400);
        res.end();
        return;
      }
      const conversation = Array.isArray(body.tools) && body.tools.length > 0;
      if (conversation) requests.push(body);
      const turn = conversation ? pickTurn(body) : { text: "Shepherd test" };
      const { id, out } = events(turn, body.model ?? "claude-test");
      if (!body.stream) {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({
          id, type: "message", role: "assistant", model: body.model,
          content: [{ type: "text", text: turn.text ?? "ok" }],
          stop_reason: "end_turn", stop_sequence: null,
          usage: { input_tokens: 10, output_tokens: 5 },
        }));
        return;
      }
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
      for (const [event, data] of out) res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
      res.end();
    });
  });

  return new Promise((resolve) => {
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      resolve({
        url: `http://127.0.0.1:${port}`,
        requests,
        close: () => new Promise((r) => server.close(r)),
      });
    });
  });
}
