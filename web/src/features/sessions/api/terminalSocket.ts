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
import type { ActivityState, TerminalClientMessage, TerminalServerMessage } from "@/api/types";
import { authStore } from "@/auth/token";

export type TerminalLink = "connecting" | "open" | "reconnecting" | "exited";

export interface TerminalHandlers {
  /** Output to show; with `reset`, clear the screen first (it is the whole screen). */
  onOutput(data: string, reset: boolean): void;
  onLink(link: TerminalLink): void;
  onActivity(state: ActivityState): void;
  /** The process ended; `how` says how, in words. */
  onExit(how: string): void;
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

/** Attaches to a tab's process, reconnecting until closed or the process ends. */
export function openTerminalSocket(sessionId: string, workerId: string, handlers: TerminalHandlers): TerminalSocket {
  let socket: WebSocket | null = null;
  let offset: number | null = null;
  let epoch: number | null = null;
  let closed = false;
  let ended = false;
  let backoff = 250;
  let timer: ReturnType<typeof setTimeout> | undefined;

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
    ws.onopen = () => {
      backoff = 250;
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
      handlers.onLink("reconnecting");
      timer = setTimeout(connect, backoff);
      backoff = Math.min(backoff * 2, 2_000);
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
      socket?.close();
    },
  };
}
