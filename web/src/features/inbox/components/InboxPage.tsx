// The Inbox: what agents ask people. Pending requests newest first, each
// answered in place; tabs for the ended ones (answered, expired, withdrawn)
// with who answered. Answers are never optimistic: a request leaves the
// list when the server says it ended.
import { Link } from "@tanstack/react-router";
import type { InputRequest, InputState } from "@/api/types";
import { answerText, answeredByText, requestTitle } from "@/components/InputRequestView";
import { AlreadyAnswered, useAnswerRequest, useInboxRequests, usePendingRequests, type AnswerVariables } from "@/features/inbox/api/inbox";
import { NotificationButton } from "./NotificationButton";
import { RequestCard } from "./RequestCard";

export type InboxTab = Exclude<InputState, "pending">;

export interface InboxSearch {
  state?: InboxTab;
}

const TABS: InboxTab[] = ["answered", "expired", "withdrawn"];

export function validateInboxSearch(search: Record<string, unknown>): InboxSearch {
  const s = search.state;
  return { state: TABS.find((t) => t === s) };
}

const EMPTY: Record<InputState, string> = {
  pending: "Nothing waits for you.",
  answered: "No answered requests yet.",
  expired: "No expired requests.",
  withdrawn: "No withdrawn requests.",
};

const TAB_LABEL: Record<InputState, string> = { pending: "Pending", answered: "Answered", expired: "Expired", withdrawn: "Withdrawn" };

function AnswerNotice({ error, variables, answered }: { error: Error | null; variables: AnswerVariables | undefined; answered: InputRequest | undefined }) {
  if (error instanceof AlreadyAnswered) {
    const r = error.request;
    return (
      <p className="notice notice-warn" role="alert" data-testid="answer-conflict">
        {r ? (
          <>
            Someone answered “{requestTitle(r)}” first: <strong>{answerText(r) || r.state}</strong>
            {r.answered_by && <> by {answeredByText(r.answered_by)}</>}. The list is up to date again.
          </>
        ) : (
          <>That request was already answered. The list is up to date again.</>
        )}
      </p>
    );
  }
  if (error) {
    return (
      <p className="notice notice-error" role="alert" data-testid="answer-error">
        Could not answer {variables ? "the request" : ""}: {error.message}
      </p>
    );
  }
  if (answered) {
    return (
      <p className="notice muted" role="status" data-testid="answer-done">
        Answered “{requestTitle(answered)}”: {answerText(answered)}
      </p>
    );
  }
  return null;
}

export function InboxPage({ search }: { search: InboxSearch }) {
  const state: InputState = search.state ?? "pending";
  const pending = usePendingRequests();
  const list = useInboxRequests(state);
  const answer = useAnswerRequest();
  const busyId = answer.isPending ? answer.variables?.id : undefined;
  const pendingCount = pending.data?.length;

  return (
    <div className="page inbox-page" data-testid="inbox">
      <header className="page-header">
        <h1>Inbox</h1>
        <NotificationButton />
      </header>
      <nav className="pills inbox-tabs" aria-label="Requests by state">
        {(["pending", ...TABS] as InputState[]).map((t) => (
          <Link
            key={t}
            to="/inbox"
            search={t === "pending" ? {} : { state: t }}
            className={`pill${t === state ? " pill-active" : ""}`}
            aria-current={t === state ? "page" : undefined}
            data-testid={`inbox-tab-${t}`}
          >
            {TAB_LABEL[t]}
            {t === "pending" && pendingCount !== undefined && ` (${pendingCount})`}
          </Link>
        ))}
      </nav>
      <div aria-live="polite">
        <AnswerNotice error={answer.error} variables={answer.variables} answered={answer.data} />
      </div>
      {list.isPending && <div className="empty">Loading…</div>}
      {list.isError && (
        <div className="empty error" role="alert">
          Could not load requests: {list.error.message}
        </div>
      )}
      {list.isSuccess && list.data.length === 0 && (
        <div className="empty" data-testid="inbox-empty">
          {EMPTY[state]}
        </div>
      )}
      {list.isSuccess && list.data.length > 0 && (
        <ul className="request-list" aria-label={`${TAB_LABEL[state]} requests`} data-testid="request-list" data-state={state}>
          {list.data.map((r) => (
            <li key={r.id}>
              <RequestCard request={r} busy={busyId === r.id} onAnswer={(a) => answer.mutate({ id: r.id, answer: a })} />
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}
