// A conversation's messages in order, kept scrolled to the newest.
import { useEffect, useRef } from "react";
import type { ConversationDetail } from "@/api/types";
import { StatusBadge } from "@/components/StatusBadge";
import { AgentReply } from "./AgentReply";

export function Messages({ detail }: { detail: ConversationDetail }) {
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
