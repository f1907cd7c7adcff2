// At phone width only (styles.css hides it on wider screens): the link
// between the conversation and the resources with their history.
import { Link } from "@tanstack/react-router";

interface Props {
  resourceId: string;
  conversationId?: string;
  view?: "history";
}

export function ViewSwitch({ resourceId, conversationId, view }: Props) {
  const to = "/resources/$resourceId/conversations/{-$conversationId}" as const;
  const params = { resourceId, conversationId };
  return view === "history" ? (
    <Link to={to} params={params} search={{}} className="btn btn-small view-switch" data-testid="show-conversation">
      Back to the conversation
    </Link>
  ) : (
    <Link to={to} params={params} search={{ view: "history" }} className="btn btn-small view-switch" data-testid="show-history">
      <span aria-hidden="true">← </span>History
    </Link>
  );
}
