// Adds a tab to a session: a terminal, an agent (its `interactive_command`)
// or a git diff.
import { useState, type FormEvent } from "react";
import type { SessionWorker } from "@/api/types";
import { useAgents } from "@/api/agents";
import { useSessionActions } from "@/features/sessions/api/sessions";

export function AddTabForm({ sessionId, onAdded }: { sessionId: string; onAdded: (w: SessionWorker) => void }) {
  const { addWorker } = useSessionActions();
  const agents = useAgents();
  const [type, setType] = useState("terminal");
  const [agent, setAgent] = useState("");
  const agentId = agent || agents.data?.[0]?.id || "";
  const submit = (e: FormEvent) => {
    e.preventDefault();
    addWorker.mutate(
      { id: sessionId, type, agent_id: type === "agent" ? agentId : undefined },
      { onSuccess: (w) => onAdded(w) },
    );
  };
  return (
    <form className="add-tab" onSubmit={submit} aria-label="Add a tab">
      <label className="inline-field">
        <span>New tab</span>
        <select value={type} onChange={(e) => setType(e.target.value)} data-testid="tab-type">
          <option value="terminal">Terminal</option>
          <option value="agent">Agent</option>
          <option value="git-diff">Git diff</option>
        </select>
      </label>
      {type === "agent" && (
        <label className="inline-field">
          <span>Agent</span>
          <select value={agentId} onChange={(e) => setAgent(e.target.value)} data-testid="tab-agent">
            {(agents.data ?? []).map((a) => (
              <option key={a.id} value={a.id}>
                {a.id}
              </option>
            ))}
          </select>
        </label>
      )}
      <button type="submit" className="btn btn-small" disabled={addWorker.isPending || (type === "agent" && !agentId)} data-testid="tab-add">
        Add
      </button>
      {addWorker.error && (
        <span className="error" role="alert">
          {addWorker.error.message}
        </span>
      )}
    </form>
  );
}
