// A resource's conversations, newest first, with their state and size.
import { Link } from "@tanstack/react-router";
import type { ConversationInfo } from "@/api/types";
import { StatusBadge } from "@/components/StatusBadge";
import { RelativeTime } from "@/components/time";
import { moveFocus } from "@/features/conversations/utils/moveFocus";

export function ConversationList({
  resourceId,
  conversations,
  shown,
}: {
  resourceId: string;
  conversations: ConversationInfo[];
  shown?: string;
}) {
  if (conversations.length === 0) return <p className="empty">No conversations yet.</p>;
  return (
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
              <RelativeTime iso={c.created_at} />
              {c.active && <span className="badge badge-blue">active</span>}
              {c.state !== "idle" && <StatusBadge status={c.state === "processing" ? "running" : c.state} label={c.state} />}
            </span>
            <span className="muted small">
              {c.messages} {c.messages === 1 ? "message" : "messages"}
            </span>
          </Link>
        </li>
      ))}
    </ul>
  );
}
