// One agent on the home page: its running, failed and queued counts, its
// concurrency limit and capabilities; its name links to its Workers page.
import { Link } from "@tanstack/react-router";
import type { Agent } from "@/api/types";
import { useAgentCounts } from "@/features/home/api/agentCounts";

export function AgentCard({ agent }: { agent: Agent }) {
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
