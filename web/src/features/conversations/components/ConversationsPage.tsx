// The conversations contract's conversations at /resources/$resourceId/conversations/$conversationId?:
// the resources, the chosen resource's conversations (newest first) and one
// conversation's messages with the agent's steps arriving live. Only one
// conversation per resource runs at a time: while it does, the send box is
// disabled ("AI is working…") and the choices are to wait or cancel. An
// older conversation is read-only until "Continue this conversation".
// At phone width (styles.css) one column shows: the conversation, or with
// ?view=history the resources and the history; ViewSwitch goes between them.
import { useEffect } from "react";
import { useNavigate } from "@tanstack/react-router";
import { ApiError } from "@/api/errors";
import { StatusBadge } from "@/components/StatusBadge";
import { RelativeTime } from "@/components/time";
import {
  useConversation,
  useConversationActions,
  useConversationList,
  useConversationLiveUpdates,
  useResources,
} from "@/features/conversations/api/conversations";
import { ResourceList } from "./ResourceList";
import { NewResourceForm } from "./NewResourceForm";
import { ConversationList, conversationTitle } from "./ConversationList";
import { Messages } from "./Messages";
import { Composer } from "./Composer";
import { OperatorOnly } from "@/components/OperatorOnly";
import { ViewSwitch } from "./ViewSwitch";

export interface ConversationsSearch {
  view?: "history";
}

export function validateConversationsSearch(search: Record<string, unknown>): ConversationsSearch {
  return { view: search.view === "history" ? "history" : undefined };
}

interface Props {
  resourceId?: string;
  conversationId?: string;
  view?: "history";
}

export function ConversationsPage({ resourceId, conversationId, view }: Props) {
  const resources = useResources();
  const navigate = useNavigate();
  const resource = resources.data?.find((r) => r.id === resourceId);
  const list = useConversationList(resourceId ?? "");
  const conversations = resourceId ? list.conversations : [];
  // Without an id in the URL: the resource's active conversation, else the newest.
  const shownId = conversationId ?? resource?.active_conversation_id ?? conversations[0]?.id ?? undefined;
  const detail = useConversation(resourceId ? shownId : undefined);
  useConversationLiveUpdates(resourceId ?? "", shownId, detail);
  const { newChat } = useConversationActions(resourceId ?? "");

  // /conversations with no resource chosen: go to the first one.
  useEffect(() => {
    if (!resourceId && resources.data && resources.data.length > 0) {
      void navigate({
        to: "/resources/$resourceId/conversations/{-$conversationId}",
        params: { resourceId: resources.data[0].id },
        replace: true,
      });
    }
  }, [resourceId, resources.data, navigate]);

  const startNewChat = () =>
    newChat.mutate(undefined, {
      onSuccess: (c) =>
        void navigate({ to: "/resources/$resourceId/conversations/{-$conversationId}", params: { resourceId: resourceId!, conversationId: c.id } }),
    });

  const notFound = detail.error instanceof ApiError && detail.error.status === 404;
  return (
    <div className="page conversations-page" data-view={resourceId && view !== "history" ? "conversation" : "history"}>
      <header className="page-header">
        <h1>Conversations{resource && <span className="muted"> · {resource.name}</span>}</h1>
        {resourceId && <ViewSwitch resourceId={resourceId} conversationId={conversationId} view={view} />}
      </header>
      <div className="three-columns">
        <section className="column-list" aria-label="Resources">
          <h2 className="column-title">Resources</h2>
          <div className="column-scroll">
            {resources.data && resources.data.length === 0 && <p className="empty">No resources yet.</p>}
            <ResourceList resources={resources.data ?? []} current={resourceId} />
            <OperatorOnly>
              <details className="new-resource">
                <summary>New resource</summary>
                <NewResourceForm />
              </details>
            </OperatorOnly>
          </div>
        </section>
        <section className="column-list" aria-label="History">
          <div className="column-title-row">
            <h2 className="column-title">History</h2>
            {resourceId && (
              <OperatorOnly>
                <button type="button" className="btn btn-small" onClick={startNewChat} disabled={newChat.isPending} data-testid="new-chat">
                  New chat
                </button>
              </OperatorOnly>
            )}
          </div>
          <div className="column-scroll">
            {resourceId && (
              <ConversationList
                resourceId={resourceId}
                conversations={conversations}
                shown={shownId}
                more={list.hasMore ? { loading: list.loadingMore, load: list.loadMore } : undefined}
              />
            )}
          </div>
        </section>
        <section
          className="column-detail conversation"
          aria-label="Conversation"
          data-testid="conversation"
          data-conversation-id={detail.data?.id}
          data-state={detail.data?.state}
        >
          {!resourceId && <p className="empty">Choose a resource to see its conversations.</p>}
          {resourceId && !shownId && list.isSuccess && (
            <div className="empty">
              <p>No conversation yet.</p>
              <OperatorOnly>
                <button type="button" className="btn btn-primary" onClick={startNewChat} disabled={newChat.isPending}>
                  Start a chat
                </button>
              </OperatorOnly>
            </div>
          )}
          {notFound && <p className="empty">This conversation does not exist.</p>}
          {detail.data && (
            <>
              <div className="conversation-head">
                <h2 className="conversation-title" data-testid="conversation-title" title={detail.data.title ?? undefined}>
                  {conversationTitle(detail.data.title)}
                </h2>
                <StatusBadge status={detail.data.state === "processing" ? "running" : detail.data.state} label={detail.data.state} />
                {detail.data.active ? <span className="badge badge-blue">active</span> : <span className="badge badge-grey">history</span>}
                <span className="muted small">
                  started <RelativeTime iso={detail.data.created_at} />
                </span>
              </div>
              {/* A fresh list per conversation: its sizes and scroll are its own. */}
              <Messages key={detail.data.id} detail={detail.data} />
              <OperatorOnly fallback={<p className="muted composer-read-only">A viewer reads conversations; an operator writes in them.</p>}>
                <Composer
                  detail={detail.data}
                  resourceId={resourceId!}
                  replying={conversations.find((c) => c.state === "processing" && c.id !== detail.data.id)}
                />
              </OperatorOnly>
            </>
          )}
        </section>
      </div>
    </div>
  );
}
