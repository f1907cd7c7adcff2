// The frame around every page: the top bar (navigation with the Inbox's
// count, live status, theme), the page itself, the event stream's bridge and
// the token prompt.
import { Link, Outlet } from "@tanstack/react-router";
import { ConnectionIndicator } from "@/events/ConnectionIndicator";
import { EventsBridge } from "@/events/EventsBridge";
import { TokenPrompt } from "@/auth/TokenPrompt";
import { ThemeToggle } from "@/features/theme/components/ThemeToggle";
import { InboxNavLink } from "@/features/inbox/components/InboxNavLink";
import { useInputRequestLiveUpdates } from "@/api/inputRequests";

export function Shell() {
  // Every list of input requests on any page follows the `input.*` events.
  useInputRequestLiveUpdates();
  return (
    <div className="app">
      <a href="#main" className="skip-link">
        Skip to content
      </a>
      <nav className="topbar" aria-label="Main">
        <Link to="/" className="brand">
          Shepherd
        </Link>
        <Link to="/" activeOptions={{ exact: true }} activeProps={{ className: "nav-active" }}>
          Agents
        </Link>
        <InboxNavLink />
        <Link to="/tasks" activeProps={{ className: "nav-active" }}>
          Tasks
        </Link>
        <Link to="/fleet" activeProps={{ className: "nav-active" }}>
          Fleet
        </Link>
        <Link to="/conversations" activeProps={{ className: "nav-active" }}>
          Conversations
        </Link>
        <Link to="/sessions" activeProps={{ className: "nav-active" }}>
          Sessions
        </Link>
        <span className="spacer" />
        <ConnectionIndicator />
        <ThemeToggle />
      </nav>
      <main id="main" className="main">
        <Outlet />
      </main>
      <EventsBridge />
      <TokenPrompt />
    </div>
  );
}
