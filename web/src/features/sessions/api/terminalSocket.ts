// A PTY tab's WebSocket, the sessions contract's /ws/session/:sessionId/worker/:workerId.
//
// The server sends `history` on attach, then `output` frames, each with the
// byte offset through its end, and `epoch`, which changes with each new
// process. When the socket drops (a server restart, a network blip) it
// reconnects with the offset and epoch it has: the same process sends only
// what followed; a new one (restored after a restart) sends its whole
// history, the old output above the restore marker, and the screen starts
// over from it. Browsers cannot set headers on a WebSocket, so the token
// travels as the `bearer.<token>` subprotocol, never in the URL.
//
// A browser cannot read why an upgrade was refused, so a socket that closes
// before it ever opened asks again with a plain GET of the same URL (the
// token as a bearer header, like every API call), which answers the reason:
// a session hosted by another node, or a tab that is gone or not a terminal,
// ends the attempts; anything else the server says is shown while it keeps
// trying; `websocket_required` (the tab could be attached) and no answer at
// all (the server is down) are a plain "Reconnecting…".
import { api } from "@/api/client";
import type { ActivityState, ErrorBody, TerminalClientMessage, TerminalServerMessage } from "@/api/types";
import { authStore } from "@/auth/token";

export type TerminalLink = "connecting" | "open" | "reconnecting" | "exited" | "refused";

/** Why the server would not attach the tab, as its plain GET answered. */
export interface TerminalRefusal {
  status: number;
  code: string;
  message: string;
  /** For `session_on_other_node`: the node hosting the session, and its address when it gave one. */
  node?: { id: string; address: string | null };
  /** Whether the socket keeps trying (a node that may come back), or gave up. */
  retrying: boolean;
}

export interface TerminalHandlers {
  /** Output to show; with `reset`, clear the screen first (it is the whole screen). */
  onOutput(data: string, reset: boolean): void;
  onLink(link: TerminalLink): void;
  onActivity(state: ActivityState): void;
  /** The process ended; `how` says how, in words. */
  onExit(how: string): void;
  /** Why attaching was refused; null once attached (or the reason is gone). */
  onRefused(refusal: TerminalRefusal | null): void;
}

export interface TerminalSocket {
  send(message: TerminalClientMessage): void;
  close(): void;
}

function exitText(m: Extract<TerminalServerMessage, { type: "exit" }>): string {
  return m.signal != null ? `ended by signal ${m.signal}` : `exited with code ${m.exitCode ?? "?"}`;
}

function socketUrl(sessionId: string, workerId: string, query: string): string {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}/ws/session/${encodeURIComponent(sessionId)}/worker/${encodeURIComponent(workerId)}${query}`;
}

/**
 * The body of a refused attach: the API's ErrorBody, with `node_id` and
 * `address` beside `error` for `session_on_other_node` (extra fields the
 * generated ErrorBody does not name).
 */
type RefusalBody = ErrorBody & { node_id?: unknown; address?: unknown };

function isRefusalBody(body: unknown): body is RefusalBody {
  if (typeof body !== "object" || body === null || !("error" in body)) return false;
  const error: unknown = body.error;
  return typeof error === "object" && error !== null && "code" in error && typeof error.code === "string";
}

/** Answers that no retry changes: the tab lives elsewhere, or not at all. */
const FINAL = new Set([404, 409, 422]);

/**
 * Asks the plain GET why the tab cannot be attached. Null when it could be
 * (`websocket_required`) or when nothing answered.
 */
async function askWhy(sessionId: string, workerId: string, signal: AbortSignal): Promise<TerminalRefusal | null> {
  let response: Response;
  let body: unknown;
  try {
    const r = await api.GET("/ws/session/{sessionId}/worker/{workerId}", { params: { path: { sessionId, workerId } }, signal });
    response = r.response;
    body = r.error;
  } catch {
    return null; // no answer: the server is down or the network is
  }
  if (response.ok || !isRefusalBody(body) || body.error.code === "websocket_required") return null;
  const { code, message } = body.error;
  const node =
    code === "session_on_other_node" && typeof body.node_id === "string"
      ? { id: body.node_id, address: typeof body.address === "string" && body.address !== "" ? body.address : null }
      : undefined;
  return { status: response.status, code, message, node, retrying: !FINAL.has(response.status) };
}

/** Attaches to a tab's process, reconnecting until closed or the process ends. */
export function openTerminalSocket(sessionId: string, workerId: string, handlers: TerminalHandlers): TerminalSocket {
  let socket: WebSocket | null = null;
  let offset: number | null = null;
  let epoch: number | null = null;
  let closed = false;
  let ended = false;
  let backoff = 250;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const asking = new AbortController();

  const retry = () => {
    handlers.onLink("reconnecting");
    timer = setTimeout(connect, backoff);
    backoff = Math.min(backoff * 2, 2_000);
  };

  const connect = () => {
    const resume = offset !== null && epoch !== null;
    const token = authStore.token();
    const ws = new WebSocket(
      socketUrl(sessionId, workerId, resume ? `?offset=${offset}&epoch=${epoch}` : ""),
      token ? ["shepherd.v1", `bearer.${token}`] : ["shepherd.v1"],
    );
    socket = ws;
    // The first history of a resumed attach continues the screen when the
    // epoch is ours; any other history is the whole screen.
    let firstHistory = true;
    let opened = false;
    ws.onopen = () => {
      opened = true;
      backoff = 250;
      handlers.onRefused(null);
      handlers.onLink("open");
    };
    ws.onmessage = (ev: MessageEvent<string>) => {
      let m: TerminalServerMessage;
      try {
        m = JSON.parse(ev.data) as TerminalServerMessage;
      } catch {
        return;
      }
      switch (m.type) {
        case "history": {
          // It continues the screen only when it starts where we stopped
          // (same process); otherwise it is the whole retained screen.
          const continues = firstHistory && resume && m.epoch === epoch && m.start === offset;
          firstHistory = false;
          handlers.onOutput(m.data, !continues);
          offset = m.offset;
          epoch = m.epoch;
          break;
        }
        case "output":
          handlers.onOutput(m.data, false);
          offset = m.offset;
          break;
        case "activity":
          handlers.onActivity(m.state);
          break;
        case "exit":
          ended = true;
          handlers.onExit(exitText(m));
          handlers.onLink("exited");
          break;
        case "error":
          console.warn(`terminal: ${m.code}: ${m.message}`);
          break;
      }
    };
    ws.onclose = () => {
      if (socket !== ws) return;
      socket = null;
      if (closed || ended) return;
      if (opened) return retry();
      // Refused before it opened: ask why, then retry or give up.
      void askWhy(sessionId, workerId, asking.signal).then((refusal) => {
        if (closed) return;
        handlers.onRefused(refusal);
        if (refusal && !refusal.retrying) handlers.onLink("refused");
        else retry();
      });
    };
  };

  connect();
  return {
    send(message) {
      if (socket?.readyState === WebSocket.OPEN) socket.send(JSON.stringify(message));
    },
    close() {
      closed = true;
      clearTimeout(timer);
      asking.abort();
      socket?.close();
    },
  };
}
