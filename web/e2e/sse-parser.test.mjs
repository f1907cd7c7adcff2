// Unit tests of the event-stream parser the UI reads /api/events with
// (src/events/sseParser.ts, transpiled here with esbuild, Vite's own).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { transformSync } from "esbuild";

const source = readFileSync(new URL("../src/events/sseParser.ts", import.meta.url), "utf8");
const { code } = transformSync(source, { loader: "ts", format: "esm" });
const { SseParser } = await import(`data:text/javascript;base64,${Buffer.from(code).toString("base64")}`);

function parseAll(chunks) {
  const p = new SseParser();
  return chunks.flatMap((c) => p.push(c));
}

test("frames with id, event and data are parsed; comments are skipped", () => {
  const out = parseAll([": keep-alive\n\nid: 7\nevent: worker_status\ndata: {\"a\":1}\n\n"]);
  assert.deepEqual(out, [{ id: "7", event: "worker_status", data: '{"a":1}' }]);
});

test("a frame split anywhere across chunks is parsed once, whole", () => {
  const frame = "id: 12\nevent: tool_started\ndata: {\"tool_name\":\"shell\"}\n\n";
  for (let cut = 1; cut < frame.length; cut++) {
    assert.deepEqual(parseAll([frame.slice(0, cut), frame.slice(cut)]), [{ id: "12", event: "tool_started", data: '{"tool_name":"shell"}' }], `cut at ${cut}`);
  }
});

test("CRLF and CR line endings, even a CRLF split between chunks", () => {
  assert.deepEqual(parseAll(["id: 1\r\ndata: x\r", "\n\r\n"]), [{ id: "1", event: "message", data: "x" }]);
  assert.deepEqual(parseAll(["data: y\r\r"]), [{ id: null, event: "message", data: "y" }]);
});

test("several data lines join with newlines; the id carries over; a frame without data dispatches nothing", () => {
  const out = parseAll(["id: 3\ndata: a\ndata: b\n\n", "event: resync\ndata: {}\n\n", "event: lonely\n\n"]);
  assert.deepEqual(out, [
    { id: "3", event: "message", data: "a\nb" },
    { id: "3", event: "resync", data: "{}" },
  ]);
});

test("a field without a colon and a value without a space are read as the spec says", () => {
  assert.deepEqual(parseAll(["data\n\ndata:tight\n\n"]), [
    { id: null, event: "message", data: "" },
    { id: null, event: "message", data: "tight" },
  ]);
});
