// The frame around every page: the top bar (navigation with the Inbox's
// count, folded into a menu on a phone; live status, who is signed in, theme), the page
// itself, the event stream's bridge and the token prompt.
import { Outlet } from "@tanstack/react-router";
import { ConnectionIndicator } from "@/events/ConnectionIndicator";
import { EventsBridge } from "@/events/EventsBridge";
import { TokenPrompt } from "@/auth/TokenPrompt";
import { ThemeToggle } from "@/features/theme/components/ThemeToggle";
import { MainNav } from "@/app/MainNav";
import { AccountMenu } from "@/features/account/components/AccountMenu";
import { useInputRequestLiveUpdates } from "@/api/inputRequests";

export function Shell() {
  // Every list of input requests on any page follows the `input.*` events.
  useInputRequestLiveUpdates();
  return (
    <div className="app">
      <a href="#main" className="skip-link">
        Skip to content
      </a>
      <header className="topbar">
        <MainNav />
        <span className="spacer" />
        <ConnectionIndicator />
        <AccountMenu />
        <ThemeToggle />
      </header>
      <main id="main" className="main">
        <Outlet />
      </main>
      <EventsBridge />
      <TokenPrompt />
    </div>
  );
}
