// A run's input requests inline in its views (the Workers page's detail, the
// task page's runs): each with its answer and who gave it, and a "Waiting for
// you" marker linking to the Inbox while any is pending.
import { Link } from "@tanstack/react-router";
import type { InputRequest } from "@/api/types";
import { InputRequestBody, InputRequestOutcome, KindBadge, requestTitle } from "@/components/InputRequestView";
import { RelativeTime } from "@/components/time";

/** The marker a run shows while `count` of its requests wait for a person. */
export function WaitingForYou({ count }: { count: number }) {
  if (count <= 0) return null;
  return (
    <p className="waiting-for-you" data-testid="waiting-for-you">
      <strong>Waiting for you</strong>
      <span>
        {count === 1 ? "1 request" : `${count} requests`} · <Link to="/inbox">Answer in the Inbox</Link>
      </span>
    </p>
  );
}

/** The requests of one run, oldest first (as the transcript reads). */
export function RunInputRequests({ requests }: { requests: InputRequest[] }) {
  if (requests.length === 0) return null;
  const ordered = [...requests].sort((a, b) => Date.parse(a.created_at) - Date.parse(b.created_at));
  return (
    <ol className="run-requests" aria-label="Input requests" data-testid="run-requests">
      {ordered.map((r) => (
        <li key={r.id} className="run-request" data-testid="run-request" data-request-id={r.id} data-state={r.state}>
          <div className="request-head">
            <KindBadge request={r} />
            <span className="request-title">{requestTitle(r)}</span>
            <span className="muted request-age">
              <RelativeTime iso={r.created_at} />
            </span>
          </div>
          <InputRequestBody request={r} />
          <InputRequestOutcome request={r} />
        </li>
      ))}
    </ol>
  );
}
