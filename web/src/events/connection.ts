// One event stream per browser, shared by all of its tabs.
//
// Browsers allow six HTTP/1.1 connections per host, so tabs elect a leader
// with the Web Locks API: the tab holding the lock reads `GET /api/events`
// (with fetch, so that it can send the bearer header) and relays every event
// and its connection state on a BroadcastChannel; the others only listen.
// When the leader closes, its lock is released and the next tab takes over,
// resuming with `Last-Event-ID` from the last sequence number any tab saw.
// Without those APIs each tab reads its own stream.
//
// A fresh stream starts at `now` and asks the page to refetch once it is
// open, so nothing between the page's reads and the stream is missed; a
// resumed stream misses nothing by construction. On `resync` the page
// refetches instead of guessing.

import type { WireEvent } from "@/api/types";
import { authStore } from "@/auth/token";
import { SseParser } from "./sseParser";

export type ConnectionStatus = "connecting" | "live" | "reconnecting" | "resync" | "unauthorized";

/**
 * An event as the stream delivers it: the generated `WireEvent` with the SSE
 * `event:` name it came under (the Workers page contract's names for run activity).
 */
export type ServerEvent = WireEvent & { event: string };

type Message =
  | { kind: "events"; events: ServerEvent[] }
  | { kind: "status"; status: ConnectionStatus }
  | { kind: "refetch" }
  | { kind: "hello" };

type EventListener = (events: ServerEvent[]) => void;
type RefetchListener = () => void;

const eventListeners = new Set<EventListener>();
const refetchListeners = new Set<RefetchListener>();
const statusListeners = new Set<() => void>();

let status: ConnectionStatus = "connecting";
let lastSeq: number | null = null;
let channel: BroadcastChannel | null = null;
let leader = false;
let abort: AbortController | null = null;
let started = false;

function setStatus(s: ConnectionStatus, relay = true) {
  if (s !== status) {
    status = s;
    for (const l of statusListeners) l();
  }
  if (relay && leader) post({ kind: "status", status: s });
}

function post(m: Message) {
  channel?.postMessage(m);
}

function deliver(events: ServerEvent[]) {
  for (const e of events) if (lastSeq === null || e.seq > lastSeq) lastSeq = e.seq;
  for (const l of eventListeners) l(events);
}

function refetch() {
  for (const l of refetchListeners) l();
}

function onMessage(m: Message) {
  switch (m.kind) {
    case "events":
      deliver(m.events);
      break;
    case "status":
      if (!leader) setStatus(m.status, false);
      break;
    case "refetch":
      refetch();
      break;
    case "hello":
      if (leader) post({ kind: "status", status });
      break;
  }
}

function delay(ms: number, signal: AbortSignal) {
  return new Promise<void>((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener("abort", () => {
      clearTimeout(t);
      resolve();
    });
  });
}

function waitForToken(signal: AbortSignal) {
  return new Promise<void>((resolve) => {
    const off = authStore.subscribe(() => {
      if (!authStore.needed()) {
        off();
        resolve();
      }
    });
    signal.addEventListener("abort", () => {
      off();
      resolve();
    });
  });
}

/** Reads the stream until it ends; returns whether it got as far as open. */
async function readOnce(signal: AbortSignal): Promise<"opened" | "failed" | "unauthorized"> {
  const headers: Record<string, string> = { Accept: "text/event-stream" };
  const token = authStore.token();
  if (token) headers.Authorization = `Bearer ${token}`;
  const resumed = lastSeq !== null;
  if (resumed) headers["Last-Event-ID"] = String(lastSeq);
  let res: Response;
  try {
    res = await fetch(resumed ? "/api/events" : "/api/events?after=now", { headers, signal, cache: "no-store" });
  } catch {
    return "failed";
  }
  if (res.status === 401) {
    authStore.markNeeded();
    return "unauthorized";
  }
  if (!res.ok || !res.body) return "failed";
  setStatus("live");
  if (!resumed) {
    refetch();
    post({ kind: "refetch" });
  }
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  const parser = new SseParser();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      const batch: ServerEvent[] = [];
      for (const m of parser.push(value)) {
        if (m.event === "resync") {
          setStatus("resync");
          refetch();
          post({ kind: "refetch" });
          continue;
        }
        try {
          const parsed = JSON.parse(m.data) as WireEvent;
          batch.push({ ...parsed, event: m.event });
        } catch {
          /* a frame that is not JSON is not ours to guess at */
        }
      }
      if (batch.length > 0) {
        if (status !== "live") setStatus("live");
        deliver(batch);
        post({ kind: "events", events: batch });
      }
    }
  } catch {
    /* dropped connection: reconnect below */
  }
  return "opened";
}

async function lead(signal: AbortSignal) {
  leader = true;
  let backoff = 500;
  let first = true;
  while (!signal.aborted) {
    if (!first) setStatus("reconnecting");
    first = false;
    const outcome = await readOnce(signal);
    if (signal.aborted) break;
    if (outcome === "unauthorized") {
      setStatus("unauthorized");
      await waitForToken(signal);
      backoff = 500;
      first = true;
      continue;
    }
    if (outcome === "opened") backoff = 500;
    await delay(backoff, signal);
    backoff = Math.min(backoff * 2, 10_000);
  }
  leader = false;
}

/** Starts this tab's part in the shared connection (once). */
export function startEvents() {
  if (started) return;
  started = true;
  const controller = new AbortController();
  abort = controller;
  if (typeof BroadcastChannel !== "undefined") {
    channel = new BroadcastChannel("shepherd-events");
    channel.onmessage = (e: MessageEvent<Message>) => onMessage(e.data);
  }
  const locks = typeof navigator !== "undefined" ? navigator.locks : undefined;
  if (channel && locks) {
    post({ kind: "hello" });
    // Held until this tab goes away: the next tab in line then leads.
    void locks.request("shepherd-events-leader", () => lead(controller.signal));
  } else {
    void lead(controller.signal);
  }
}

/** Stops reading (tests and teardown). */
export function stopEvents() {
  abort?.abort();
  channel?.close();
  started = false;
}

export function subscribeEvents(l: EventListener) {
  eventListeners.add(l);
  return () => {
    eventListeners.delete(l);
  };
}

export function subscribeRefetch(l: RefetchListener) {
  refetchListeners.add(l);
  return () => {
    refetchListeners.delete(l);
  };
}

export function connectionStatus() {
  return status;
}

export function subscribeStatus(l: () => void) {
  statusListeners.add(l);
  return () => {
    statusListeners.delete(l);
  };
}

/** After a refetch completes, a resync is over. */
export function resyncDone() {
  if (status === "resync") setStatus("live");
}

export function isLeader() {
  return leader;
}
