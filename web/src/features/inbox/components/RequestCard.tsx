// One request in the Inbox: what the agent wants or asks, where it comes
// from (task, run, agent, age) and, while pending, the ways to answer it;
// once ended, its answer and who gave it.
import { useId, useState } from "react";
import { Link } from "@tanstack/react-router";
import type { InputAnswer, InputRequest } from "@/api/types";
import { InputRequestBody, InputRequestOutcome, KindBadge, requestTitle } from "@/components/InputRequestView";
import { RelativeTime } from "@/components/time";
import { OperatorOnly } from "@/components/OperatorOnly";

export function RequestCard({ request: r, busy, onAnswer }: { request: InputRequest; busy: boolean; onAnswer: (answer: InputAnswer) => void }) {
  const titleId = useId();
  return (
    <article className="card request-card" aria-labelledby={titleId} data-testid="input-request" data-request-id={r.id} data-kind={r.kind} data-state={r.state}>
      <header className="request-head">
        <KindBadge request={r} />
        <h2 id={titleId} className="request-title">
          {requestTitle(r)}
        </h2>
        <span className="muted request-age">
          <RelativeTime iso={r.created_at} />
        </span>
      </header>
      <p className="request-meta">
        <Link to="/tasks/$vtid" params={{ vtid: r.vtid }} data-testid="request-task">
          {r.vtid}
        </Link>
        <span className="muted"> · </span>
        <Link to="/agents/$agentId/workers" params={{ agentId: r.agent_id }} search={{ worker: r.run_id }} data-testid="request-run">
          run <span className="mono" title={r.run_id}>
            …{r.run_id.slice(-8)}
          </span>
        </Link>
        <span className="muted"> · agent {r.agent_id}</span>
        {r.state === "pending" && r.expires_at && (
          <span className="muted">
            {" "}
            · expires at <time dateTime={r.expires_at}>{new Date(r.expires_at).toLocaleTimeString()}</time>
          </span>
        )}
      </p>
      <InputRequestBody request={r} />
      {r.state === "pending" ? (
        <OperatorOnly fallback={<p className="muted" data-testid="answer-read-only">Waiting for an operator's answer.</p>}>
          {r.kind === "permission" ? (
            <PermissionAnswer busy={busy} onAnswer={onAnswer} labelledBy={titleId} />
          ) : (
            <QuestionAnswer request={r} busy={busy} onAnswer={onAnswer} labelledBy={titleId} />
          )}
        </OperatorOnly>
      ) : (
        <InputRequestOutcome request={r} />
      )}
    </article>
  );
}

function PermissionAnswer({ busy, onAnswer, labelledBy }: { busy: boolean; onAnswer: (a: InputAnswer) => void; labelledBy: string }) {
  const [message, setMessage] = useState("");
  const id = useId();
  const answer = (decision: "allow" | "deny") => onAnswer({ decision, message: message.trim() || undefined });
  return (
    <form className="request-answer" aria-labelledby={labelledBy} onSubmit={(e) => e.preventDefault()}>
      <label htmlFor={id} className="request-answer-label">
        Message to the agent <span className="muted">(optional)</span>
      </label>
      <input id={id} type="text" value={message} onChange={(e) => setMessage(e.target.value)} data-testid="answer-message" autoComplete="off" />
      <div className="request-actions">
        <button type="button" className="btn btn-primary" disabled={busy} onClick={() => answer("allow")} data-testid="answer-allow">
          Allow
        </button>
        <button type="button" className="btn btn-danger" disabled={busy} onClick={() => answer("deny")} data-testid="answer-deny">
          Deny
        </button>
      </div>
    </form>
  );
}

function QuestionAnswer({
  request: r,
  busy,
  onAnswer,
  labelledBy,
}: {
  request: InputRequest;
  busy: boolean;
  onAnswer: (a: InputAnswer) => void;
  labelledBy: string;
}) {
  const [text, setText] = useState("");
  const id = useId();
  if (r.options.length > 0) {
    return (
      <div className="request-answer" role="group" aria-labelledby={labelledBy}>
        <div className="request-actions">
          {r.options.map((o) => (
            <button key={o} type="button" className="btn" disabled={busy} onClick={() => onAnswer({ option: o })} data-testid="answer-option" data-option={o}>
              {o}
            </button>
          ))}
        </div>
      </div>
    );
  }
  return (
    <form
      className="request-answer"
      aria-labelledby={labelledBy}
      onSubmit={(e) => {
        e.preventDefault();
        if (text.trim()) onAnswer({ text: text.trim() });
      }}
    >
      <label htmlFor={id} className="request-answer-label">
        Your answer
      </label>
      <textarea id={id} rows={2} value={text} onChange={(e) => setText(e.target.value)} data-testid="answer-text" />
      <div className="request-actions">
        <button type="submit" className="btn btn-primary" disabled={busy || !text.trim()} data-testid="answer-send">
          Send answer
        </button>
      </div>
    </form>
  );
}
