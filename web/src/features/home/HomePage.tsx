// Home: every agent with its running, failed and queued counts and its
// concurrency limit; each links to its Workers page.
import { Link } from "@tanstack/react-router";
import { useQueryClient } from "@tanstack/react-query";
import type { Agent } from "../../api/gaps";
import { useServerEvents } from "../../events/hooks";
import { agentKeys, useAgentCounts, useAgents } from "./queries";

function AgentRow({ agent }: { agent: Agent }) {
  const counts = useAgentCounts(agent.id);
  return (
    <li className="agent-card" data-testid="agent-card" data-agent-id={agent.id}>
      <div className="agent-head">
        <Link to="/agents/$agentId/workers" params={{ agentId: agent.id }} className="agent-name">
          {agent.id}
        </Link>
        <span className="muted">
          {agent.worker_type} · {agent.source}
        </span>
      </div>
      <dl className="agent-stats">
        <div>
          <dt>Running</dt>
          <dd data-testid="agent-running">{agent.running}</dd>
        </div>
        <div>
          <dt>Failed</dt>
          <dd data-testid="agent-failed">{counts.data?.failed ?? "–"}</dd>
        </div>
        <div>
          <dt>Queued</dt>
          <dd data-testid="agent-queued">{counts.data?.queued ?? "–"}</dd>
        </div>
        <div>
          <dt>Limit</dt>
          <dd>{agent.max_concurrent ?? "none"}</dd>
        </div>
      </dl>
      {agent.capabilities.length > 0 && (
        <div className="caps">
          {agent.capabilities.map((c) => (
            <span key={c} className="badge badge-neutral">
              {c}
            </span>
          ))}
        </div>
      )}
    </li>
  );
}

export function HomePage() {
  const agents = useAgents();
  const client = useQueryClient();
  useServerEvents((events) => {
    if (events.some((e) => e.event.startsWith("worker_") || e.type.startsWith("task.") || e.type.startsWith("agent."))) {
      void client.invalidateQueries({ queryKey: agentKeys.all });
    }
  });
  return (
    <div className="page">
      <header className="page-header">
        <h1>Agents</h1>
        <Link to="/tasks" search={{ new: true }} className="btn btn-primary">
          New task
        </Link>
      </header>
      {agents.isError && (
        <div className="empty error" role="alert">
          Could not load agents: {agents.error.message}
        </div>
      )}
      {agents.isSuccess && agents.data.length === 0 && (
        <div className="empty">No agents yet: declare one under [agents.NAME] in shepherd.toml, or register a worker.</div>
      )}
      <ul className="agent-grid" aria-label="Agents">
        {agents.data?.map((a) => <AgentRow key={a.id} agent={a} />)}
      </ul>
    </div>
  );
}
