// A PTY tab as a real terminal: xterm.js with the fit addon over seed 004's
// WebSocket, /ws/session/:sessionId/worker/:workerId. This module (and
// xterm with it) is loaded only on session pages.
//
// The server sends `history` on attach, then `output` frames, each with the
// byte offset through its end, and `epoch`, which changes with each new
// process. When the socket drops (a server restart, a network blip) the
// terminal reconnects with the offset and epoch it has: the same process
// sends only what followed; a new one (restored after a restart) sends its
// whole history, the old output above the restore marker, and the terminal
// starts over from it. Browsers cannot set headers on a WebSocket, so the
// token travels as the `bearer.<token>` subprotocol, never in the URL.
import { useEffect, useRef, useState } from "react";
import { Terminal, type ITheme } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import "@xterm/xterm/css/xterm.css";
import { authStore } from "../../auth/token";

type Link = "connecting" | "open" | "reconnecting" | "exited";

type ServerMessage =
  | { type: "history"; data: string; offset: number; epoch: number; start: number }
  | { type: "output"; data: string; offset: number }
  | { type: "activity"; state: "active" | "idle" }
  | { type: "exit"; exitCode: number | null; signal: number | null }
  | { type: "error"; code: string; message: string };

const LABEL: Record<Link, string> = {
  connecting: "Connecting…",
  open: "Connected",
  reconnecting: "Reconnecting…",
  exited: "Process ended",
};

/** xterm's colours from the page's theme variables. */
function themeFromPage(): ITheme {
  const css = getComputedStyle(document.documentElement);
  const v = (name: string) => css.getPropertyValue(name).trim();
  return {
    background: v("--term-bg") || v("--panel"),
    foreground: v("--term-fg") || v("--text"),
    cursor: v("--accent"),
    selectionBackground: v("--selected"),
  };
}

export default function TerminalView({ sessionId, workerId }: { sessionId: string; workerId: string }) {
  const host = useRef<HTMLDivElement>(null);
  const [link, setLink] = useState<Link>("connecting");
  const [activity, setActivity] = useState<"active" | "idle">("idle");
  const [exit, setExit] = useState<string | null>(null);

  useEffect(() => {
    const el = host.current!;
    const term = new Terminal({
      fontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace',
      fontSize: 13,
      scrollback: 5000,
      theme: themeFromPage(),
    });
    const fit = new FitAddon();
    term.loadAddon(fit);
    term.open(el);
    fit.fit();
    el.dataset.cols = String(term.cols);
    el.dataset.rows = String(term.rows);

    let socket: WebSocket | null = null;
    let offset: number | null = null;
    let epoch: number | null = null;
    let disposed = false;
    let ended = false;
    let backoff = 250;
    let timer: ReturnType<typeof setTimeout> | undefined;

    const send = (m: object) => {
      if (socket?.readyState === WebSocket.OPEN) socket.send(JSON.stringify(m));
    };
    const sendSize = () => {
      // The size is on the element too, for anyone inspecting the page.
      el.dataset.cols = String(term.cols);
      el.dataset.rows = String(term.rows);
      send({ type: "resize", cols: term.cols, rows: term.rows });
    };

    const connect = () => {
      const resume = offset !== null && epoch !== null;
      const query = resume ? `?offset=${offset}&epoch=${epoch}` : "";
      const scheme = location.protocol === "https:" ? "wss:" : "ws:";
      const token = authStore.token();
      const url = `${scheme}//${location.host}/ws/session/${encodeURIComponent(sessionId)}/worker/${encodeURIComponent(workerId)}${query}`;
      const ws = new WebSocket(url, token ? ["shepherd.v1", `bearer.${token}`] : ["shepherd.v1"]);
      socket = ws;
      // The first history of a resumed attach continues the screen when the
      // epoch is ours; any other history is the whole screen.
      let firstHistory = true;
      ws.onopen = () => {
        backoff = 250;
        setLink("open");
        sendSize();
      };
      ws.onmessage = (ev: MessageEvent<string>) => {
        let m: ServerMessage;
        try {
          m = JSON.parse(ev.data) as ServerMessage;
        } catch {
          return;
        }
        switch (m.type) {
          case "history":
            // It continues the screen only when it starts where we stopped
            // (same process); otherwise it is the whole retained screen.
            if (!(firstHistory && resume && m.epoch === epoch && m.start === offset)) term.reset();
            firstHistory = false;
            term.write(m.data);
            offset = m.offset;
            epoch = m.epoch;
            break;
          case "output":
            term.write(m.data);
            offset = m.offset;
            break;
          case "activity":
            setActivity(m.state);
            break;
          case "exit":
            ended = true;
            setExit(m.signal !== null ? `ended by signal ${m.signal}` : `exited with code ${m.exitCode ?? "?"}`);
            setLink("exited");
            break;
          case "error":
            console.warn(`terminal: ${m.code}: ${m.message}`);
            break;
        }
      };
      ws.onclose = () => {
        if (socket !== ws) return;
        socket = null;
        if (disposed || ended) return;
        setLink("reconnecting");
        timer = setTimeout(connect, backoff);
        backoff = Math.min(backoff * 2, 2_000);
      };
    };

    const input = term.onData((data) => send({ type: "input", data }));
    const resized = term.onResize(() => sendSize());
    // Fit to the element whenever it changes size (the window, the layout).
    const observer = new ResizeObserver(() => {
      try {
        fit.fit();
      } catch {
        /* not laid out yet */
      }
    });
    observer.observe(el);
    // Follow the page's theme (the toggle or the system's scheme).
    const retheme = () => {
      term.options.theme = themeFromPage();
    };
    const themeObserver = new MutationObserver(retheme);
    themeObserver.observe(document.documentElement, { attributes: true, attributeFilter: ["data-theme"] });
    const media = window.matchMedia("(prefers-color-scheme: dark)");
    media.addEventListener("change", retheme);

    connect();
    term.focus();
    return () => {
      disposed = true;
      clearTimeout(timer);
      observer.disconnect();
      themeObserver.disconnect();
      media.removeEventListener("change", retheme);
      input.dispose();
      resized.dispose();
      socket?.close();
      term.dispose();
    };
  }, [sessionId, workerId]);

  return (
    <div className="terminal-wrap">
      <div className="terminal-status">
        <span className={`conn conn-${link === "open" ? "live" : link === "exited" ? "unauthorized" : "reconnecting"}`} role="status" data-testid="terminal-link" data-state={link}>
          <span className="conn-dot" aria-hidden="true" />
          {LABEL[link]}
          {exit && `: ${exit}`}
        </span>
        {link === "open" && <span className="muted small">{activity === "active" ? "output flowing" : "idle"}</span>}
      </div>
      <div className="terminal" ref={host} data-testid="terminal" />
    </div>
  );
}
