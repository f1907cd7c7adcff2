// One session at /sessions/$sessionId?tab=$workerId: its tabs (agent,
// terminal, git-diff) with the chosen one in the URL. PTY tabs are real
// terminals (xterm, loaded only here); git-diff tabs show the rendered diff.
// Tabs are added, restarted (new or continue) and closed from here.
import { lazy, Suspense, useState, type KeyboardEvent } from "react";
import { Link, useNavigate } from "@tanstack/react-router";
import { ApiError } from "@/api/errors";
import { OperatorOnly } from "@/components/OperatorOnly";
import { useSession, useSessionActions, useSessionLiveUpdates } from "@/features/sessions/api/sessions";
import { AddTabForm } from "./AddTabForm";
import { DiffView } from "./DiffView";
import { TabActions } from "./TabActions";

// xterm is large: its chunk is fetched only when a terminal is shown.
const TerminalView = lazy(() => import("./TerminalView"));

export interface SessionSearch {
  tab?: string;
}

export function validateSessionSearch(search: Record<string, unknown>): SessionSearch {
  return { tab: typeof search.tab === "string" && search.tab !== "" ? search.tab : undefined };
}

const TYPE_LABEL: Record<string, string> = { agent: "agent", terminal: "terminal", "git-diff": "git diff" };

export function SessionPage({ sessionId, search }: { sessionId: string; search: SessionSearch }) {
  const session = useSession(sessionId);
  useSessionLiveUpdates();
  const navigate = useNavigate({ from: "/sessions/$sessionId" });
  const { remove } = useSessionActions();
  const [confirmDelete, setConfirmDelete] = useState(false);
  // Bumped by a restart: the terminal reattaches for the new process.
  const [generation, setGeneration] = useState(0);
  const workers = session.data?.workers ?? [];
  const current = workers.find((w) => w.id === search.tab) ?? workers[0];
  const select = (id: string | undefined, replace = false) => void navigate({ search: { tab: id }, replace });

  const onTabKey = (e: KeyboardEvent, index: number) => {
    const step = e.key === "ArrowRight" ? 1 : e.key === "ArrowLeft" ? -1 : 0;
    if (!step || workers.length === 0) return;
    e.preventDefault();
    const next = workers[(index + step + workers.length) % workers.length];
    select(next.id);
    document.getElementById(`tab-${next.id}`)?.focus();
  };

  if (session.error) {
    return (
      <div className="page">
        <h1>Session</h1>
        <p className="error" role="alert">
          {session.error instanceof ApiError && session.error.status === 404 ? "This session does not exist." : session.error.message}
        </p>
        <Link to="/sessions">All sessions</Link>
      </div>
    );
  }
  const s = session.data;
  return (
    <div className="page session-page">
      <header className="page-header session-header">
        <h1>
          <Link to="/sessions">Sessions</Link> / {s?.name ?? "…"}
        </h1>
        {s && <code className="mono-inline">{s.location_path}</code>}
        <span className="spacer" />
        {s && (
          <OperatorOnly>
            {confirmDelete ? (
            <>
              <button type="button" className="btn btn-small btn-danger" onClick={() => remove.mutate(s.id, { onSuccess: () => void navigate({ to: "/sessions" }) })}>
                Delete session and end its processes
              </button>
              <button type="button" className="btn btn-small" onClick={() => setConfirmDelete(false)}>
                Keep it
              </button>
            </>
          ) : (
            <button type="button" className="btn btn-small btn-ghost" onClick={() => setConfirmDelete(true)}>
              Delete session
            </button>
          )}
          </OperatorOnly>
        )}
      </header>
      <div className="tabbar">
        <div role="tablist" aria-label="Tabs" className="tabs session-tabs">
          {workers.map((w, i) => (
            <button
              key={w.id}
              id={`tab-${w.id}`}
              type="button"
              role="tab"
              aria-selected={w.id === current?.id}
              aria-controls="tab-panel"
              tabIndex={w.id === current?.id ? 0 : -1}
              className={`session-tab${w.id === current?.id ? " session-tab-active" : ""}`}
              onClick={() => select(w.id)}
              onKeyDown={(e) => onTabKey(e, i)}
              data-testid="session-tab"
              data-worker-id={w.id}
              data-type={w.type}
            >
              <span className={`tab-dot${w.alive ? " tab-dot-alive" : ""}`} aria-hidden="true" />
              {w.name}
              {w.name !== w.type && <span className="muted small">{TYPE_LABEL[w.type] ?? w.type}</span>}
            </button>
          ))}
        </div>
        {s && (
          <OperatorOnly>
            <AddTabForm sessionId={s.id} onAdded={(w) => select(w.id)} />
          </OperatorOnly>
        )}
      </div>
      <section id="tab-panel" role="tabpanel" aria-labelledby={current ? `tab-${current.id}` : undefined} aria-label={current ? undefined : "No tab"} className="tab-panel">
        {s && !current && <p className="empty">No tabs yet: add a terminal, an agent or a git diff.</p>}
        {s && current && (
          <>
            <div className="tab-panel-head">
              <span className="muted small">
                {current.type === "git-diff"
                  ? "git diff of the session's directory"
                  : current.alive
                    ? `process ${current.pid ?? ""} running`
                    : current.exit_code !== null && current.exit_code !== undefined
                      ? `exited with code ${current.exit_code}`
                      : "not running: attaching restores it"}
              </span>
              <span className="spacer" />
              <OperatorOnly>
                <TabActions
                  sessionId={s.id}
                  worker={current}
                  onRestarted={() => setGeneration((g) => g + 1)}
                  onClosed={() => select(workers.find((w) => w.id !== current.id)?.id, true)}
                />
              </OperatorOnly>
            </div>
            {current.type === "git-diff" ? (
              <DiffView sessionId={s.id} workerId={current.id} />
            ) : (
              <OperatorOnly
                fallback={
                  <p className="empty" data-testid="terminal-readonly">
                    A viewer cannot open terminals: attaching to one is typing into its shell, which needs the operator role.
                  </p>
                }
              >
                <Suspense fallback={<p className="muted">Loading the terminal…</p>}>
                  <TerminalView key={`${current.id}:${generation}`} sessionId={s.id} workerId={current.id} />
                </Suspense>
              </OperatorOnly>
            )}
          </>
        )}
      </section>
    </div>
  );
}
