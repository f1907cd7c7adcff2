// Routes, with typed search params validated at the edge.
import { createRootRoute, createRoute, createRouter } from "@tanstack/react-router";
import { Shell } from "@/app/Shell";
import { NotFound } from "@/app/NotFound";
import { HomePage } from "@/features/home/components/HomePage";
import { AgentWorkersPage, validateWorkersSearch } from "@/features/workers/components/AgentWorkersPage";
import { TasksPage, validateTasksSearch } from "@/features/tasks/components/TasksPage";
import { TaskDetailPage } from "@/features/tasks/components/TaskDetailPage";
import { FleetPage, validateFleetSearch } from "@/features/fleet/components/FleetPage";
import { ConversationsPage, validateConversationsSearch } from "@/features/conversations/components/ConversationsPage";
import { SessionsPage } from "@/features/sessions/components/SessionsPage";
import { SessionPage, validateSessionSearch } from "@/features/sessions/components/SessionPage";
import { InboxPage, validateInboxSearch } from "@/features/inbox/components/InboxPage";

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
  validateSearch: validateConversationsSearch,
  component: function ResourceConversationsRoute() {
    const { resourceId, conversationId } = resourceConversationsRoute.useParams();
    const { view } = resourceConversationsRoute.useSearch();
    return <ConversationsPage resourceId={resourceId} conversationId={conversationId} view={view} />;
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

const inboxRoute = createRoute({
  getParentRoute: () => rootRoute,
  path: "/inbox",
  validateSearch: validateInboxSearch,
  component: function InboxRoute() {
    return <InboxPage search={inboxRoute.useSearch()} />;
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
  inboxRoute,
]);

export const router = createRouter({ routeTree, defaultPreload: false, scrollRestoration: true });

declare module "@tanstack/react-router" {
  interface Register {
    router: typeof router;
  }
}
