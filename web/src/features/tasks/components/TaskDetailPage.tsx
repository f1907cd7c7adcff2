// One task: its spec, state, claims, runs (with what each asked people),
// validator outcome and its event timeline, kept current by the event stream.
import { Link } from "@tanstack/react-router";
import { ApiError } from "@/api/errors";
import type { InputRequest } from "@/api/types";
import { StatusBadge } from "@/components/StatusBadge";
import { Markdown } from "@/components/Markdown";
import { RelativeTime } from "@/components/time";
import { useTask, useTaskDetailLiveUpdates, useTaskRuns, useWorkflows } from "@/features/tasks/api/tasks";
import { useInputRequests } from "@/api/inputRequests";
import { RunInputRequests, WaitingForYou } from "@/components/RunInputRequests";
import { LiveTranscript } from "@/components/LiveTranscript";
import { RunUsage } from "./RunUsage";
import { TaskActions } from "./TaskActions";

function summary(data: Record<string, unknown>): string {
  const parts: string[] = [];
  for (const k of ["from", "to", "message", "reason", "cause", "status", "purpose"]) {
    const v = data[k];
    if (typeof v === "string" && v) parts.push(k === "from" ? `${v} →` : k === "to" ? v : `${k}: ${v}`);
  }
  return parts.join(" ");
}

/** A run's requests; the marker counts the pending ones once they are loaded. */
function RunRequests({ requests, pendingInput }: { requests: InputRequest[] | undefined; pendingInput: number }) {
  const waiting = requests ? requests.filter((q) => q.state === "pending").length : pendingInput;
  return (
    <>
      <WaitingForYou count={waiting} />
      {requests && <RunInputRequests requests={requests} />}
    </>
  );
}

export function TaskDetailPage({ vtid }: { vtid: string }) {
  const task = useTask(vtid);
  const runs = useTaskRuns(vtid);
  const requests = useInputRequests({ vtid, limit: 100 });
  const workflows = useWorkflows();
  useTaskDetailLiveUpdates(vtid);
  if (task.isPending) return <div className="page empty">Loading…</div>;
  if (task.isError)
    return (
      <div className="page empty error" role="alert">
        {task.error instanceof ApiError && task.error.status === 404 ? `There is no task ${vtid}.` : task.error.message}
      </div>
    );
  const t = task.data;
  const workflow = workflows.data?.find((w) => w.name === t.workflow);
  const verdict = t.events.find((e) => e.type === "validator.passed" || e.type === "validator.failed");
  const events = [...t.events].sort((a, b) => b.seq - a.seq);
  return (
    <div className="page task-detail" data-testid="task-detail" data-state={t.state}>
      <header className="page-header">
        <h1>
          <Link to="/tasks" search={{ workflow: t.workflow === "simple" ? undefined : t.workflow }}>
            Tasks
          </Link>{" "}
          / {t.vtid}
        </h1>
        <TaskActions task={t} workflow={workflow} />
      </header>
      <div className="detail-grid">
        <section className="card">
          <h2>{t.title}</h2>
          <div className="detail-meta">
            <StatusBadge status={t.state} />
            <span className="muted">workflow {t.workflow}</span>
            {t.agent_id && (
              <Link to="/agents/$agentId/workers" params={{ agentId: t.agent_id }}>
                agent {t.agent_id}
              </Link>
            )}
            <span className="muted">priority {t.priority}</span>
            <span className="muted">attempts {t.attempts}</span>
          </div>
          {t.capabilities.length > 0 && (
            <div className="caps">
              {t.capabilities.map((c) => (
                <span key={c} className="badge badge-neutral">
                  {c}
                </span>
              ))}
            </div>
          )}
          {verdict && (
            <p data-testid="validator-outcome">
              Validator: <StatusBadge status={verdict.type === "validator.passed" ? "done" : "failed"} label={verdict.type === "validator.passed" ? "passed" : "failed"} />{" "}
              {String((verdict.data as Record<string, unknown>).message ?? "")}
            </p>
          )}
          <h3>Spec</h3>
          {t.spec ? <Markdown text={t.spec} /> : <p className="muted">No spec.</p>}
        </section>
        <section className="card">
          <h2>Runs</h2>
          {runs.data && runs.data.runs.length === 0 && <p className="muted">No runs yet.</p>}
          <ul className="plain-list">
            {runs.data?.runs.map((r) => (
              <li key={r.id}>
                <Link to="/agents/$agentId/workers" params={{ agentId: r.agent_id }} search={{ worker: r.id }}>
                  {r.purpose}
                </Link>{" "}
                <span className="muted" data-testid="run-attempt">
                  attempt {r.attempt}
                </span>{" "}
                <StatusBadge status={r.status} /> <span className="muted">{r.worker_id}</span> <RelativeTime iso={r.started_at} />
                <RunUsage usage={r.usage} workspace={r.workspace} />
                <RunRequests requests={requests.data?.filter((q) => q.run_id === r.id)} pendingInput={r.pending_input ?? 0} />
                {r.status === "running" && <LiveTranscript runId={r.id} className="run-live" />}
              </li>
            ))}
          </ul>
          <h2>Claims</h2>
          {t.claims.length === 0 && <p className="muted">No claims yet.</p>}
          <table className="table">
            <thead>
              <tr>
                <th scope="col">Worker</th>
                <th scope="col">Purpose</th>
                <th scope="col">Claimed</th>
                <th scope="col">Released</th>
              </tr>
            </thead>
            <tbody>
              {t.claims.map((c) => (
                <tr key={c.id}>
                  <td>{c.worker_id}</td>
                  <td>{c.purpose}</td>
                  <td>
                    <RelativeTime iso={c.claimed_at} />
                  </td>
                  <td>{c.released_at ? `${c.release_reason ?? "released"}` : "active"}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </section>
      </div>
      <section className="card">
        <h2>Timeline</h2>
        <ol className="timeline" data-testid="task-timeline" tabIndex={0} aria-label="Task timeline">
          {events.map((e) => (
            <li key={e.seq}>
              <span className="mono">{e.type}</span> <span className="muted">{summary(e.data)}</span>{" "}
              {e.actor && e.actor !== "system" && (
                <span className="actor" data-testid="event-actor">
                  by {e.actor}
                </span>
              )}{" "}
              <span className="muted">
                <RelativeTime iso={e.ts} />
              </span>
            </li>
          ))}
        </ol>
      </section>
    </div>
  );
}
