// Create a task: title, markdown spec, agent, capabilities, workflow, and
// whether to dispatch it at once or keep it as a draft.
import { useState, type FormEvent } from "react";
import { useAgents } from "@/api/agents";
import type { Task } from "@/api/types";
import { Markdown } from "@/components/Markdown";
import { useTaskActions, useWorkflows } from "@/features/tasks/api/tasks";

export function CreateTaskDialog({ onClose }: { onClose: (created?: Task) => void }) {
  const agents = useAgents();
  const workflows = useWorkflows();
  const { create } = useTaskActions();
  const [title, setTitle] = useState("");
  const [spec, setSpec] = useState("");
  const [agent, setAgent] = useState("");
  const [caps, setCaps] = useState("");
  const [workflow, setWorkflow] = useState("simple");
  const [dispatch, setDispatch] = useState(true);
  const [preview, setPreview] = useState(false);

  async function submit(e: FormEvent) {
    e.preventDefault();
    const task = await create
      .mutateAsync({
        title: title.trim(),
        spec,
        agent_id: agent || null,
        capabilities: caps
          .split(",")
          .map((c) => c.trim())
          .filter(Boolean),
        workflow,
        dispatch,
      })
      .catch(() => null);
    if (task) onClose(task);
  }

  return (
    <div className="overlay" onKeyDown={(e) => e.key === "Escape" && onClose()}>
      <form className="dialog dialog-wide" role="dialog" aria-modal="true" aria-labelledby="new-task-title" onSubmit={submit} data-testid="create-task">
        <h2 id="new-task-title">New task</h2>
        <label className="field">
          <span>Title</span>
          <input required autoFocus value={title} onChange={(e) => setTitle(e.target.value)} data-testid="task-title" />
        </label>
        <div className="field">
          <span className="field-row">
            <label htmlFor="task-spec">Spec (markdown)</label>
            <button type="button" className="btn btn-ghost btn-small" onClick={() => setPreview((p) => !p)}>
              {preview ? "Edit" : "Preview"}
            </button>
          </span>
          {preview ? (
            <div className="spec-preview">
              <Markdown text={spec || "_empty_"} />
            </div>
          ) : (
            <textarea id="task-spec" rows={8} value={spec} onChange={(e) => setSpec(e.target.value)} data-testid="task-spec" />
          )}
        </div>
        <div className="field-grid">
          <label className="field">
            <span>Agent</span>
            <select value={agent} onChange={(e) => setAgent(e.target.value)} data-testid="task-agent">
              <option value="">any</option>
              {agents.data?.map((a) => (
                <option key={a.id} value={a.id}>
                  {a.id}
                </option>
              ))}
            </select>
          </label>
          <label className="field">
            <span>Workflow</span>
            <select value={workflow} onChange={(e) => setWorkflow(e.target.value)} data-testid="task-workflow">
              {(workflows.data ?? [{ name: "simple" }, { name: "autopilot" }]).map((w) => (
                <option key={w.name} value={w.name}>
                  {w.name}
                </option>
              ))}
            </select>
          </label>
          <label className="field">
            <span>Capabilities (comma-separated)</span>
            <input value={caps} onChange={(e) => setCaps(e.target.value)} placeholder="rust, shell" data-testid="task-caps" />
          </label>
        </div>
        <label className="check">
          <input type="checkbox" checked={dispatch} onChange={(e) => setDispatch(e.target.checked)} data-testid="task-dispatch" />
          Dispatch now (otherwise keep as a draft)
        </label>
        {create.isError && (
          <p className="error" role="alert">
            {create.error.message}
          </p>
        )}
        <div className="actions">
          <button type="button" className="btn" onClick={() => onClose()}>
            Cancel
          </button>
          <button type="submit" className="btn btn-primary" disabled={create.isPending || !title.trim()} data-testid="task-submit">
            Create
          </button>
        </div>
      </form>
    </div>
  );
}
