// A PTY tab as a real terminal: xterm.js with the fit addon over the tab's
// WebSocket (api/terminalSocket.ts), following the page's theme and size.
// This module (and xterm with it) is loaded only on session pages.
import { useEffect, useRef, useState } from "react";
import { Terminal, type ITheme } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import "@xterm/xterm/css/xterm.css";
import type { ActivityState } from "@/api/types";
import { openTerminalSocket, type TerminalLink, type TerminalRefusal } from "@/features/sessions/api/terminalSocket";

const LABEL: Record<TerminalLink, string> = {
  connecting: "Connecting…",
  open: "Connected",
  reconnecting: "Reconnecting…",
  exited: "Process ended",
  refused: "Not connected",
};

/**
 * This page on another node, when its address is a web one: the session's
 * own node serves the same UI, so the same path and tab open it there.
 */
function onNode(address: string): string | null {
  try {
    const base = new URL(address);
    if (base.protocol !== "http:" && base.protocol !== "https:") return null;
    return base.origin + base.pathname.replace(/\/+$/, "") + location.pathname + location.search + location.hash;
  } catch {
    return null;
  }
}

/** Why the terminal cannot attach, in words, with the way to where it can. */
function Refusal({ refusal }: { refusal: TerminalRefusal }) {
  const href = refusal.node?.address ? onNode(refusal.node.address) : null;
  return (
    <div
      className={`notice ${refusal.retrying ? "notice-warn" : "notice-error"} terminal-refusal`}
      role="alert"
      data-testid="terminal-refusal"
      data-code={refusal.code}
    >
      {refusal.node ? (
        <>
          This session runs on node <strong data-testid="terminal-node">{refusal.node.id}</strong>, not on this one: its terminals
          attach there.{" "}
          {href ? (
            <a href={href} data-testid="terminal-node-link">
              Open this page on {refusal.node.id}
            </a>
          ) : (
            "That node did not say where it is reached."
          )}
        </>
      ) : (
        <>
          {refusal.message}
          {refusal.retrying && " Trying again…"}
        </>
      )}
    </div>
  );
}

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
  const [link, setLink] = useState<TerminalLink>("connecting");
  const [activity, setActivity] = useState<ActivityState>("idle");
  const [exit, setExit] = useState<string | null>(null);
  const [refusal, setRefusal] = useState<TerminalRefusal | null>(null);

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

    const sendSize = () => {
      // The size is on the element too, for anyone inspecting the page.
      el.dataset.cols = String(term.cols);
      el.dataset.rows = String(term.rows);
      socket.send({ type: "resize", cols: term.cols, rows: term.rows });
    };
    const socket = openTerminalSocket(sessionId, workerId, {
      onOutput(data, reset) {
        if (reset) term.reset();
        term.write(data);
      },
      onLink(next) {
        setLink(next);
        if (next === "open") sendSize();
      },
      onActivity: setActivity,
      onExit: setExit,
      onRefused: setRefusal,
    });

    const input = term.onData((data) => socket.send({ type: "input", data }));
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

    term.focus();
    return () => {
      socket.close();
      observer.disconnect();
      themeObserver.disconnect();
      media.removeEventListener("change", retheme);
      input.dispose();
      resized.dispose();
      term.dispose();
    };
  }, [sessionId, workerId]);

  return (
    <div className="terminal-wrap">
      <div className="terminal-status">
        <span className={`conn conn-${link === "open" ? "live" : link === "exited" || link === "refused" ? "unauthorized" : "reconnecting"}`} role="status" data-testid="terminal-link" data-state={link}>
          <span className="conn-dot" aria-hidden="true" />
          {LABEL[link]}
          {exit && `: ${exit}`}
        </span>
        {link === "open" && <span className="muted small">{activity === "active" ? "output flowing" : "idle"}</span>}
      </div>
      {refusal && <Refusal refusal={refusal} />}
      <div className="terminal" ref={host} data-testid="terminal" />
    </div>
  );
}
