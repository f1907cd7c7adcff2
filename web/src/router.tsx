// Routes, with typed search params validated at the edge.
import { createRootRoute, createRoute, createRouter, Link, Outlet } from "@tanstack/react-router";
import { ConnectionIndicator } from "./events/ConnectionIndicator";
import { EventsBridge } from "./events/EventsBridge";
import { TokenPrompt } from "./auth/TokenPrompt";
import { ThemeToggle } from "./features/theme/ThemeToggle";
import { HomePage } from "./features/home/HomePage";
import { AgentWorkersPage, validateWorkersSearch } from "./features/workers/AgentWorkersPage";
import { TasksPage, validateTasksSearch } from "./features/tasks/TasksPage";
import { TaskDetailPage } from "./features/tasks/TaskDetailPage";
import { FleetPage, validateFleetSearch } from "./features/fleet/FleetPage";
import { ConversationsPage } from "./features/conversations/ConversationsPage";
import { SessionsPage } from "./features/sessions/SessionsPage";
import { SessionPage, validateSessionSearch } from "./features/sessions/SessionPage";

function Shell() {
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

function NotFound() {
  return (
    <div className="page">
      <h1>Not found</h1>
      <p>
        Nothing lives at this address. <Link to="/">Go to the agents.</Link>
      </p>
    </div>
  );
}

const rootRoute = createRootRoute({ component: Shell, notFoundComponent: NotFound });

const homeRoute = createRoute({ getParentRoute: () => rootRoute, path: "/", component: HomePage });

const agentWorkersRoute = createRoute({
  getParentRoute: () => rootRoute,
  path: "/agents/$agentId/workers",
  validateSearch: validateWorkersSearch,
  component: function AgentWorkersRoute() {
    const { agentId } = agentWorkersRoute.useParams();
    const search = agentWorkersRoute.useSearch();
    return <AgentWorkersPage agentId={agentId} search={search} />;
  },
});

const tasksRoute = createRoute({
  getParentRoute: () => rootRoute,
  path: "/tasks",
  validateSearch: validateTasksSearch,
  component: function TasksRoute() {
    return <TasksPage search={tasksRoute.useSearch()} />;
  },
});

const taskDetailRoute = createRoute({
  getParentRoute: () => rootRoute,
  path: "/tasks/$vtid",
  component: function TaskDetailRoute() {
    const { vtid } = taskDetailRoute.useParams();
    return <TaskDetailPage vtid={vtid} />;
  },
});

const fleetRoute = createRoute({
  getParentRoute: () => rootRoute,
  path: "/fleet",
  validateSearch: validateFleetSearch,
  component: function FleetRoute() {
    return <FleetPage search={fleetRoute.useSearch()} />;
  },
});

const conversationsRoute = createRoute({
  getParentRoute: () => rootRoute,
  path: "/conversations",
  component: function ConversationsIndexRoute() {
    return <ConversationsPage />;
  },
});

const resourceConversationsRoute = createRoute({
  getParentRoute: () => rootRoute,
  path: "/resources/$resourceId/conversations/{-$conversationId}",
  component: function ResourceConversationsRoute() {
    const { resourceId, conversationId } = resourceConversationsRoute.useParams();
    return <ConversationsPage resourceId={resourceId} conversationId={conversationId} />;
  },
});

const sessionsRoute = createRoute({
  getParentRoute: () => rootRoute,
  path: "/sessions",
  component: SessionsPage,
});

const sessionRoute = createRoute({
  getParentRoute: () => rootRoute,
  path: "/sessions/$sessionId",
  validateSearch: validateSessionSearch,
  component: function SessionRoute() {
    const { sessionId } = sessionRoute.useParams();
    return <SessionPage sessionId={sessionId} search={sessionRoute.useSearch()} />;
  },
});

const routeTree = rootRoute.addChildren([
  homeRoute,
  agentWorkersRoute,
  tasksRoute,
  taskDetailRoute,
  fleetRoute,
  conversationsRoute,
  resourceConversationsRoute,
  sessionsRoute,
  sessionRoute,
]);

export const router = createRouter({ routeTree, defaultPreload: false, scrollRestoration: true });

declare module "@tanstack/react-router" {
  interface Register {
    router: typeof router;
  }
}
