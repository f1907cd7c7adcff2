// The resources, each linking to its conversations; "working" marks one whose
// conversation is being answered.
import { Link } from "@tanstack/react-router";
import type { ResourceInfo } from "@/api/types";
import { moveFocus } from "@/features/conversations/utils/moveFocus";

export function ResourceList({ resources, current }: { resources: ResourceInfo[]; current?: string }) {
  return (
    <ul className="plain-list resource-list" aria-label="Resources" onKeyDown={moveFocus}>
      {resources.map((r) => (
        <li key={r.id}>
          <Link
            to="/resources/$resourceId/conversations/{-$conversationId}"
            params={{ resourceId: r.id, conversationId: undefined }}
            className={`list-link${r.id === current ? " bg-app-selected" : ""}`}
            aria-current={r.id === current ? "page" : undefined}
            data-testid="resource-link"
            data-resource-id={r.id}
          >
            <span className="list-link-title">{r.name}</span>
            <span className="muted small">
              {r.agent_id ?? "no agent"}
              {r.processing_conversation_id && " · working"}
            </span>
          </Link>
        </li>
      ))}
    </ul>
  );
}
