// A resource's conversations, newest first: each one's title (its first
// message's first line), state and size, and "Load more" while older ones
// remain.
import { Link } from "@tanstack/react-router";
import type { ConversationInfo } from "@/api/types";
import { StatusBadge } from "@/components/StatusBadge";
import { RelativeTime } from "@/components/time";
import { moveFocus } from "@/features/conversations/utils/moveFocus";

/** A conversation's title, or what to call one before its first message. */
export function conversationTitle(title: string | null | undefined): string {
  return title?.trim() ? title : "New conversation";
}

export function ConversationList({
  resourceId,
  conversations,
  shown,
  more,
}: {
  resourceId: string;
  conversations: ConversationInfo[];
  shown?: string;
  /** Set while older conversations remain to be read. */
  more?: { loading: boolean; load: () => void };
}) {
  if (conversations.length === 0) return <p className="empty">No conversations yet.</p>;
  return (
    <>
      <ul className="plain-list conversation-list" aria-label="Conversations, newest first" onKeyDown={moveFocus}>
        {conversations.map((c) => (
          <li key={c.id}>
            <Link
              to="/resources/$resourceId/conversations/{-$conversationId}"
              params={{ resourceId, conversationId: c.id }}
              className={`list-link${c.id === shown ? " bg-app-selected" : ""}`}
              aria-current={c.id === shown ? "page" : undefined}
              data-testid="conversation-item"
              data-conversation-id={c.id}
              data-state={c.state}
              data-active={c.active}
            >
              <span className="list-link-title">
                {/* The whole title stays readable on hover when it is cut. */}
                <span className={`conversation-item-title${c.title ? "" : " muted"}`} data-testid="conversation-item-title" title={c.title ?? undefined}>
                  {conversationTitle(c.title)}
                </span>
                {c.active && <span className="badge badge-blue">active</span>}
                {c.state !== "idle" && <StatusBadge status={c.state === "processing" ? "running" : c.state} label={c.state} />}
              </span>
              <span className="muted small">
                <RelativeTime iso={c.created_at} /> · {c.messages} {c.messages === 1 ? "message" : "messages"}
              </span>
            </Link>
          </li>
        ))}
      </ul>
      {more && (
        <div className="load-more">
          <button type="button" className="btn btn-small" onClick={more.load} disabled={more.loading} data-testid="load-more">
            {more.loading ? "Loading…" : "Load more"}
          </button>
        </div>
      )}
    </>
  );
}
