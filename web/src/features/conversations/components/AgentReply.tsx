// One agent reply: its steps as they arrive, then its result text.
import type { MessageInfo } from "@/api/types";
import { Markdown } from "@/components/Markdown";
import { Step } from "@/components/Step";
import { StatusBadge } from "@/components/StatusBadge";
import { RelativeTime } from "@/components/time";

export function AgentReply({ message }: { message: MessageInfo }) {
  const steps = message.steps;
  return (
    <div className="message message-agent" data-testid="message" data-role="agent" data-status={message.status} aria-label="Agent reply">
      <div className="message-head">
        <span className="message-who">Agent</span>
        <StatusBadge status={message.status} />
        <span className="muted small">
          <RelativeTime iso={message.created_at} />
        </span>
      </div>
      {steps.length > 0 && (
        <ol className="message-steps" data-testid="message-steps" data-steps={steps.length} aria-label="Steps">
          {steps.map((s, i) => (
            <li key={i} className="step" data-testid="message-step">
              <Step step={s} />
            </li>
          ))}
        </ol>
      )}
      {message.status === "running" && steps.length === 0 && <p className="muted">Thinking…</p>}
      {message.text && (
        <div className="message-result" data-testid="message-result">
          <Markdown text={message.text} />
        </div>
      )}
      {message.status === "cancelled" && <p className="muted small">Cancelled: the steps above were kept.</p>}
    </div>
  );
}
