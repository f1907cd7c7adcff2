// Seed 002's conversations at /resources/$resourceId/conversations/$conversationId?:
// the resources, the chosen resource's conversations (newest first) and one
// conversation's messages with the agent's steps arriving live. Only one
// conversation per resource runs at a time: while it does, the send box is
// disabled ("AI is working…") and the choices are to wait or cancel. An
// older conversation is read-only until "Continue this conversation".
import { useEffect, useRef, useState, type FormEvent } from "react";
import { Link, useNavigate } from "@tanstack/react-router";
import type { ConversationDetail, ConversationInfo, MessageInfo, ResourceInfo, TranscriptStep } from "../../api/types";
import { ApiError } from "../../api/client";
import { StatusBadge } from "../../components/StatusBadge";
import { RelativeTime } from "../../components/time";
import { Markdown } from "../../components/Markdown";
import { Step } from "../workers/Transcript";
import { useAgents } from "../home/queries";
import {
  useConversation,
  useConversationActions,
  useConversationList,
  useConversationLiveUpdates,
  useCreateResource,
  useResources,
} from "./queries";

/** Arrow keys, Home and End move the focus through a list of links. */
function moveFocus(e: React.KeyboardEvent<HTMLUListElement>) {
  const keys = ["ArrowDown", "ArrowUp", "Home", "End"];
  if (!keys.includes(e.key)) return;
  const links = [...e.currentTarget.querySelectorAll<HTMLAnchorElement>("a")];
  const at = links.indexOf(document.activeElement as HTMLAnchorElement);
  const next =
    e.key === "Home" ? 0 : e.key === "End" ? links.length - 1 : e.key === "ArrowDown" ? Math.min(at + 1, links.length - 1) : Math.max(at - 1, 0);
  if (links[next]) {
    e.preventDefault();
    links[next].focus();
  }
}

function ResourceList({ resources, current }: { resources: ResourceInfo[]; current?: string }) {
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

function NewResourceForm() {
  const agents = useAgents();
  const create = useCreateResource();
  const navigate = useNavigate();
  const [id, setId] = useState("");
  const [name, setName] = useState("");
  const [agent, setAgent] = useState("");
  const agentId = agent || agents.data?.[0]?.id || "";
  const submit = (e: FormEvent) => {
    e.preventDefault();
    create.mutate(
      { id, name: name || id, agent_id: agentId },
      { onSuccess: (r) => void navigate({ to: "/resources/$resourceId/conversations/{-$conversationId}", params: { resourceId: r.id } }) },
    );
  };
  return (
    <form className="stack-form" onSubmit={submit} aria-label="New resource">
      <label className="field">
        <span>Resource id</span>
        <input value={id} onChange={(e) => setId(e.target.value)} required pattern="[A-Za-z0-9._\-]+" />
      </label>
      <label className="field">
        <span>Name</span>
        <input value={name} onChange={(e) => setName(e.target.value)} />
      </label>
      <label className="field">
        <span>Agent</span>
        <select value={agentId} onChange={(e) => setAgent(e.target.value)}>
          {(agents.data ?? []).map((a) => (
            <option key={a.id} value={a.id}>
              {a.id}
            </option>
          ))}
        </select>
      </label>
      {create.error && (
        <p className="error" role="alert">
          {create.error.message}
        </p>
      )}
      <button type="submit" className="btn btn-small" disabled={!id || !agentId || create.isPending}>
        Add resource
      </button>
    </form>
  );
}

function ConversationList({
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

function AgentReply({ message }: { message: MessageInfo }) {
  const steps = message.steps as unknown as TranscriptStep[];
  return (
    <div className="message message-agent" data-testid="message" data-role="agent" data-status={message.status} aria-label="Agent reply">
      <div className="message-head">
        <span className="message-who">Agent</span>
        <StatusBadge status={message.status} />
        <span className="muted small">
          <RelativeTime iso={message.created_at} />
        </span>
      </div>
      {steps.length > 0 && (
        <ol className="message-steps" data-testid="message-steps" data-steps={steps.length} aria-label="Steps">
          {steps.map((s, i) => (
            <li key={i} className="step" data-testid="message-step">
              <Step step={s} />
            </li>
          ))}
        </ol>
      )}
      {message.status === "running" && steps.length === 0 && <p className="muted">Thinking…</p>}
      {message.text && (
        <div className="message-result" data-testid="message-result">
          <Markdown text={message.text} />
        </div>
      )}
      {message.status === "cancelled" && <p className="muted small">Cancelled: the steps above were kept.</p>}
    </div>
  );
}

function Messages({ detail }: { detail: ConversationDetail }) {
  const end = useRef<HTMLDivElement>(null);
  const count = detail.messages.reduce((n, m) => n + 1 + m.steps.length, 0);
  useEffect(() => {
    end.current?.scrollIntoView({ block: "end" });
  }, [count]);
  if (detail.messages.length === 0) return <p className="empty">Say something to start the conversation.</p>;
  return (
    <div className="messages" data-testid="messages">
      {detail.messages.map((m) =>
        m.role === "user" ? (
          <div key={m.id} className="message message-user" data-testid="message" data-role="user" data-status={m.status}>
            <div className="message-head">
              <span className="message-who">You</span>
              {m.status !== "sent" && <StatusBadge status={m.status} />}
            </div>
            <div className="message-text">{m.text}</div>
          </div>
        ) : (
          <AgentReply key={m.id} message={m} />
        ),
      )}
      <div ref={end} />
    </div>
  );
}

function Composer({ detail, resourceId }: { detail: ConversationDetail; resourceId: string }) {
  const { send, cancel, activate } = useConversationActions(resourceId);
  const [text, setText] = useState("");
  const busy = detail.state !== "idle";
  if (!detail.active) {
    return (
      <div className="composer composer-history" data-testid="history-note">
        <span className="muted">You are reading an older conversation.</span>
        <button type="button" className="btn btn-primary btn-small" onClick={() => activate.mutate(detail.id)} disabled={activate.isPending} data-testid="continue-btn">
          Continue this conversation
        </button>
      </div>
    );
  }
  const submit = (e?: FormEvent) => {
    e?.preventDefault();
    const t = text.trim();
    if (!t || busy) return;
    send.mutate({ id: detail.id, text: t }, { onSuccess: () => setText("") });
  };
  return (
    <form className="composer" onSubmit={submit} aria-label="Send a message">
      {busy && (
        <div className="composer-status" role="status" data-testid="working">
          <span className="spinner" aria-hidden="true" />
          {detail.state === "processing" ? "AI is working…" : "Cancelling…"}
          <button
            type="button"
            className="btn btn-small btn-danger"
            onClick={() => cancel.mutate(detail.id)}
            disabled={cancel.isPending || detail.state !== "processing"}
            data-testid="cancel-btn"
          >
            Cancel
          </button>
        </div>
      )}
      <div className="composer-row">
        <textarea
          value={text}
          onChange={(e) => setText(e.target.value)}
          onKeyDown={(e) => {
            if (e.key === "Enter" && !e.shiftKey) {
              e.preventDefault();
              submit();
            }
          }}
          placeholder={busy ? "AI is working… wait or cancel" : "Message the agent (Enter sends, Shift+Enter for a new line)"}
          aria-label="Message"
          disabled={busy}
          rows={2}
          data-testid="send-input"
        />
        <button type="submit" className="btn btn-primary" disabled={busy || !text.trim() || send.isPending} data-testid="send-btn">
          Send
        </button>
      </div>
      {(send.error || cancel.error || activate.error) && (
        <p className="error" role="alert">
          {(send.error ?? cancel.error ?? activate.error)!.message}
        </p>
      )}
    </form>
  );
}

export function ConversationsPage({ resourceId, conversationId }: { resourceId?: string; conversationId?: string }) {
  const resources = useResources();
  const navigate = useNavigate();
  const resource = resources.data?.find((r) => r.id === resourceId);
  const list = useConversationList(resourceId ?? "");
  const conversations = resourceId ? (list.data?.conversations ?? []) : [];
  // Without an id in the URL: the resource's active conversation, else the newest.
  const shownId = conversationId ?? resource?.active_conversation_id ?? conversations[0]?.id ?? undefined;
  const detail = useConversation(resourceId ? shownId : undefined);
  useConversationLiveUpdates(resourceId ?? "", shownId, detail.data?.cursor);
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
    <div className="page conversations-page">
      <header className="page-header">
        <h1>Conversations{resource && <span className="muted"> · {resource.name}</span>}</h1>
      </header>
      <div className="three-columns">
        <section className="column-list" aria-label="Resources">
          <h2 className="column-title">Resources</h2>
          <div className="column-scroll">
            {resources.data && resources.data.length === 0 && <p className="empty">No resources yet.</p>}
            <ResourceList resources={resources.data ?? []} current={resourceId} />
            <details className="new-resource">
              <summary>New resource</summary>
              <NewResourceForm />
            </details>
          </div>
        </section>
        <section className="column-list" aria-label="History">
          <div className="column-title-row">
            <h2 className="column-title">History</h2>
            {resourceId && (
              <button type="button" className="btn btn-small" onClick={startNewChat} disabled={newChat.isPending} data-testid="new-chat">
                New chat
              </button>
            )}
          </div>
          <div className="column-scroll">
            {resourceId && <ConversationList resourceId={resourceId} conversations={conversations} shown={shownId} />}
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
              <button type="button" className="btn btn-primary" onClick={startNewChat} disabled={newChat.isPending}>
                Start a chat
              </button>
            </div>
          )}
          {notFound && <p className="empty">This conversation does not exist.</p>}
          {detail.data && (
            <>
              <div className="conversation-head">
                <StatusBadge status={detail.data.state === "processing" ? "running" : detail.data.state} label={detail.data.state} />
                {detail.data.active ? <span className="badge badge-blue">active</span> : <span className="badge badge-grey">history</span>}
                <span className="muted small">
                  started <RelativeTime iso={detail.data.created_at} />
                </span>
              </div>
              <Messages detail={detail.data} />
              <Composer detail={detail.data} resourceId={resourceId!} />
            </>
          )}
        </section>
      </div>
    </div>
  );
}
