// A tab's buttons: restart (a fresh process, or for an agent with its
// continue arguments) and close.
import type { SessionWorker } from "@/api/types";
import { useSessionActions } from "@/features/sessions/api/sessions";

export function TabActions({ sessionId, worker, onRestarted, onClosed }: { sessionId: string; worker: SessionWorker; onRestarted: () => void; onClosed: () => void }) {
  const { restart, removeWorker } = useSessionActions();
  const pty = worker.type !== "git-diff";
  const error = restart.error ?? removeWorker.error;
  return (
    <div className="tab-actions" role="group" aria-label="Tab actions">
      {pty && (
        <>
          <button
            type="button"
            className="btn btn-small"
            disabled={restart.isPending}
            onClick={() => restart.mutate({ id: sessionId, workerId: worker.id, mode: "new" }, { onSuccess: onRestarted })}
            data-testid="restart-new"
          >
            Restart: new
          </button>
          {worker.type === "agent" && (
            <button
              type="button"
              className="btn btn-small"
              disabled={restart.isPending}
              onClick={() => restart.mutate({ id: sessionId, workerId: worker.id, mode: "continue" }, { onSuccess: onRestarted })}
              data-testid="restart-continue"
            >
              Restart: continue
            </button>
          )}
        </>
      )}
      <button
        type="button"
        className="btn btn-small btn-danger"
        disabled={removeWorker.isPending}
        onClick={() => removeWorker.mutate({ id: sessionId, workerId: worker.id }, { onSuccess: onClosed })}
        data-testid="tab-close"
      >
        Close tab
      </button>
      {error && (
        <span className="error" role="alert">
          {error.message}
        </span>
      )}
    </div>
  );
}
