// An input request as the Inbox and the run views show it: what the agent
// wants to do (a tool and its exact input, a Bash command as the command) or
// asks (a prompt and its options), and how it ended (the answer and who gave
// it).
import type { InputRequest } from "@/api/types";
import { Badge, StatusBadge } from "@/components/StatusBadge";
import { RelativeTime } from "@/components/time";

/** The request's tool input as a Bash command, when it is one. */
export function bashCommand(r: Pick<InputRequest, "tool_name" | "tool_input">): string | null {
  const input = r.tool_input as unknown;
  if (r.tool_name !== "Bash" || !input || typeof input !== "object") return null;
  const command = (input as Record<string, unknown>).command;
  return typeof command === "string" ? command : null;
}

/** The tool input's other fields beside a Bash command (a description, a timeout). */
function bashExtras(r: InputRequest): Record<string, unknown> | null {
  const rest = { ...(r.tool_input as Record<string, unknown>) };
  delete rest.command;
  return Object.keys(rest).length > 0 ? rest : null;
}

/** "Bash" or "Write" for a permission, "Question" for a question. */
export function requestTitle(r: InputRequest): string {
  return r.kind === "permission" ? (r.tool_name ?? "Permission") : "Question";
}

/** What the agent wants or asks, in full. */
export function InputRequestBody({ request: r }: { request: InputRequest }) {
  if (r.kind === "question") {
    return (
      <div className="request-body">
        <p className="request-prompt" data-testid="request-prompt">
          {r.prompt}
        </p>
        {r.options.length > 0 && (
          <p className="request-options muted">
            Options:{" "}
            {r.options.map((o, i) => (
              <span key={o}>
                {i > 0 && ", "}
                <span className="mono">{o}</span>
              </span>
            ))}
          </p>
        )}
      </div>
    );
  }
  const command = bashCommand(r);
  const extras = command !== null ? bashExtras(r) : null;
  return (
    <div className="request-body">
      {r.prompt && (
        <p className="request-prompt" data-testid="request-prompt">
          {r.prompt}
        </p>
      )}
      {command !== null ? (
        <pre className="request-input request-command" data-testid="request-command" tabIndex={0} aria-label="Command">
          <span aria-hidden="true" className="muted">
            ${" "}
          </span>
          {command}
        </pre>
      ) : (
        <pre className="request-input" data-testid="request-input" tabIndex={0} aria-label="Tool input">
          {JSON.stringify(r.tool_input ?? null, null, 2)}
        </pre>
      )}
      {extras && (
        <pre className="request-input request-extras" tabIndex={0} aria-label="Other input">
          {JSON.stringify(extras, null, 2)}
        </pre>
      )}
    </div>
  );
}

/** Who answered: `operator`, `worker:<id>`, `rule:<rule>`, `timeout`, … as the server says. */
export function answeredByText(by: string | null | undefined): string {
  return by === "run_ended" ? "the run ending" : (by ?? "");
}

/** The answer in a few words: "Allowed", "Denied: not here", "yes". */
export function answerText(r: InputRequest): string {
  const a = r.answer;
  if (!a) return r.state === "withdrawn" ? "Withdrawn" : "";
  const parts: string[] = [];
  if (a.decision) parts.push(a.decision === "allow" ? "Allowed" : "Denied");
  if (a.option) parts.push(`“${a.option}”`);
  if (a.text) parts.push(`“${a.text}”`);
  let text = parts.join(" ");
  if (a.message) text += `${text ? ": " : ""}${a.message}`;
  return text;
}

const STATE_TONE: Record<string, string> = { pending: "amber", answered: "green", expired: "grey", withdrawn: "grey" };

/** The request's state and, once it ended, its answer and who gave it. */
export function InputRequestOutcome({ request: r }: { request: InputRequest }) {
  return (
    <p className="request-outcome" data-testid="request-outcome">
      <Badge tone={STATE_TONE[r.state] ?? "neutral"}>{r.state}</Badge>
      {r.state !== "pending" && (
        <>
          {" "}
          <span data-testid="request-answer">{answerText(r)}</span>
          {r.answered_by && (
            <span className="muted" data-testid="request-answered-by">
              {" "}
              by {answeredByText(r.answered_by)}
            </span>
          )}
          {r.answered_at && (
            <span className="muted">
              {" "}
              <RelativeTime iso={r.answered_at} />
            </span>
          )}
        </>
      )}
      {r.state === "pending" && r.expires_at && (
        <span className="muted">
          {" "}
          expires at <time dateTime={r.expires_at}>{new Date(r.expires_at).toLocaleTimeString()}</time>
        </span>
      )}
    </p>
  );
}

/** A kind badge: permission or question. */
export function KindBadge({ request: r }: { request: InputRequest }) {
  return <StatusBadge status={r.kind === "permission" ? "reviewing" : "pending"} label={r.kind} />;
}
