// The sessions contract's sessions at /sessions: every workspace with its tabs, and a
// form to open a new one on a directory of a host (this server, or a runner's).
import { useState, type FormEvent } from "react";
import { Link, useNavigate } from "@tanstack/react-router";
import { RelativeTime } from "@/components/time";
import { OperatorOnly } from "@/components/OperatorOnly";
import { HostSelect } from "@/features/sessions/components/HostSelect";
import { useSessionActions, useSessionLiveUpdates, useSessions } from "@/features/sessions/api/sessions";

function CreateSessionForm() {
  const { create } = useSessionActions();
  const navigate = useNavigate();
  const [name, setName] = useState("");
  const [path, setPath] = useState("");
  const [host, setHost] = useState("");
  const submit = (e: FormEvent) => {
    e.preventDefault();
    create.mutate(
      { name: name.trim() || undefined, location_path: path.trim(), host: host || undefined },
      { onSuccess: (s) => void navigate({ to: "/sessions/$sessionId", params: { sessionId: s.id }, search: {} }) },
    );
  };
  return (
    <form className="card session-form" onSubmit={submit} aria-labelledby="new-session-title">
      <h2 id="new-session-title">New session</h2>
      <div className="form-row">
        <label className="field">
          <span>Name</span>
          <input value={name} onChange={(e) => setName(e.target.value)} placeholder="defaults to the directory's name" data-testid="session-name" />
        </label>
        <HostSelect value={host} onChange={setHost} />
        <label className="field grow">
          <span>Location path</span>
          <input value={path} onChange={(e) => setPath(e.target.value)} placeholder="/home/me/project" required data-testid="session-path" />
        </label>
        <button type="submit" className="btn btn-primary" disabled={!path.trim() || create.isPending} data-testid="session-create">
          Create
        </button>
      </div>
      {create.error && (
        <p className="error" role="alert">
          {create.error.message}
        </p>
      )}
    </form>
  );
}

export function SessionsPage() {
  const sessions = useSessions();
  useSessionLiveUpdates();
  const list = sessions.data?.sessions ?? [];
  return (
    <div className="page sessions-page">
      <header className="page-header">
        <h1>Sessions</h1>
      </header>
      <OperatorOnly>
        <CreateSessionForm />
      </OperatorOnly>
      {sessions.error && (
        <p className="error" role="alert">
          {sessions.error.message}
        </p>
      )}
      {sessions.isSuccess && list.length === 0 && <p className="empty">No sessions yet: open one on a directory above.</p>}
      {list.length > 0 && (
        <table className="table card" data-testid="session-table">
          <caption className="sr-only">Sessions</caption>
          <thead>
            <tr>
              <th scope="col">Name</th>
              <th scope="col">Location</th>
              <th scope="col">Tabs</th>
              <th scope="col">Created</th>
            </tr>
          </thead>
          <tbody>
            {list.map((s) => (
              <tr key={s.id} data-testid="session-row" data-session-id={s.id}>
                <td>
                  <Link to="/sessions/$sessionId" params={{ sessionId: s.id }} search={{}}>
                    {s.name}
                  </Link>
                </td>
                <td className="mono-inline">{s.location_path}</td>
                <td>
                  {s.workers.length === 0
                    ? "none"
                    : s.workers.map((w) => `${w.name} (${w.type}${w.alive ? ", running" : ""})`).join(", ")}
                </td>
                <td>
                  <RelativeTime iso={s.created_at} />
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </div>
  );
}
