// The navigation's "Inbox" item with the count of pending requests, which
// also prefixes the document's title; it notifies new requests while the
// user allows it.
import { useEffect } from "react";
import { Link, useNavigate } from "@tanstack/react-router";
import { usePendingRequests } from "@/features/inbox/api/inbox";
import { useInputRequestNotifications } from "@/features/inbox/api/notifications";

const TITLE = "Shepherd";

export function InboxNavLink() {
  const pending = usePendingRequests();
  const navigate = useNavigate();
  useInputRequestNotifications(() => void navigate({ to: "/inbox" }));
  const count = pending.data?.length ?? 0;
  useEffect(() => {
    document.title = count > 0 ? `(${count}) ${TITLE}` : TITLE;
  }, [count]);
  return (
    <Link to="/inbox" className="nav-inbox" activeProps={{ className: "nav-active" }} data-testid="nav-inbox" data-count={count}>
      Inbox
      {count > 0 && (
        <span className="nav-count" data-testid="inbox-count">
          <span className="sr-only">, </span>
          {count}
          <span className="sr-only"> waiting</span>
        </span>
      )}
    </Link>
  );
}
