// Home: every agent with its running, failed and queued counts and its
// concurrency limit; each links to its Workers page.
import { Link } from "@tanstack/react-router";
import { useAgents } from "@/api/agents";
import { useAgentLiveUpdates } from "@/features/home/api/agentCounts";
import { AgentCard } from "./AgentCard";

export function HomePage() {
  const agents = useAgents();
  useAgentLiveUpdates();
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
        {agents.data?.map((a) => <AgentCard key={a.id} agent={a} />)}
      </ul>
    </div>
  );
}
