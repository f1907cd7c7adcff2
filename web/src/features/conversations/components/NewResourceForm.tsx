// Adds a resource (id, name, the agent its conversations talk to) and opens it.
import { useState, type FormEvent } from "react";
import { useNavigate } from "@tanstack/react-router";
import { useAgents } from "@/api/agents";
import { useCreateResource } from "@/features/conversations/api/conversations";

export function NewResourceForm() {
  const agents = useAgents();
  const create = useCreateResource();
  const navigate = useNavigate();
  const [id, setId] = useState("");
  const [name, setName] = useState("");
  const [agent, setAgent] = useState("");
  const agentId = agent || agents.data?.[0]?.id || "";
  const submit = (e: FormEvent) => {
    e.preventDefault();
    create.mutate(
      { id, name: name || id, agent_id: agentId },
      { onSuccess: (r) => void navigate({ to: "/resources/$resourceId/conversations/{-$conversationId}", params: { resourceId: r.id } }) },
    );
  };
  return (
    <form className="stack-form" onSubmit={submit} aria-label="New resource">
      <label className="field">
        <span>Resource id</span>
        <input value={id} onChange={(e) => setId(e.target.value)} required pattern="[A-Za-z0-9._\-]+" />
      </label>
      <label className="field">
        <span>Name</span>
        <input value={name} onChange={(e) => setName(e.target.value)} />
      </label>
      <label className="field">
        <span>Agent</span>
        <select value={agentId} onChange={(e) => setAgent(e.target.value)}>
          {(agents.data ?? []).map((a) => (
            <option key={a.id} value={a.id}>
              {a.id}
            </option>
          ))}
        </select>
      </label>
      {create.error && (
        <p className="error" role="alert">
          {create.error.message}
        </p>
      )}
      <button type="submit" className="btn btn-small" disabled={!id || !agentId || create.isPending}>
        Add resource
      </button>
    </form>
  );
}
