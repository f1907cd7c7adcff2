// A conversation's messages in order, kept scrolled to the newest.
// Virtualised like the Workers transcript (components/Transcript.tsx): a
// conversation of hundreds of messages renders only what is on screen. Each
// user message and each agent reply is one item, measured as it renders.
// A new message or step scrolls to the end; while the reader is at the end
// it stays there as the newest reply grows (its result arrives without a new
// step) and as the list's own height changes (the composer's working row).
import { useEffect, useRef } from "react";
import { useVirtualizer } from "@tanstack/react-virtual";
import type { ConversationDetail } from "@/api/types";
import { StatusBadge } from "@/components/StatusBadge";
import { AgentReply } from "./AgentReply";

/** The space above the first message, between two and below the last (px). */
const GAP = 12;
/** How near the end (px) still counts as at the newest message. */
const AT_END = 32;

export function Messages({ detail }: { detail: ConversationDetail }) {
  const scrollRef = useRef<HTMLDivElement>(null);
  const atEnd = useRef(true);
  const messages = detail.messages;
  const virtualizer = useVirtualizer({
    count: messages.length,
    getScrollElement: () => scrollRef.current,
    // Measured once shown; keyed by id so a size stays with its message.
    estimateSize: (i) => (messages[i].role === "user" ? 64 : 160),
    getItemKey: (i) => messages[i].id,
    paddingStart: GAP,
    paddingEnd: GAP,
    gap: GAP,
    overscan: 6,
    // At the end, an item growing keeps the end in view.
    anchorTo: "end",
    scrollEndThreshold: AT_END,
  });
  // Every new message or step scrolls to the newest.
  const count = messages.reduce((n, m) => n + 1 + m.steps.length, 0);
  useEffect(() => {
    if (messages.length > 0) virtualizer.scrollToEnd();
  }, [count, messages.length, virtualizer]);
  // The list shrinking (the composer growing) would hide the end: follow it.
  const shown = messages.length > 0;
  useEffect(() => {
    const el = scrollRef.current;
    if (!shown || !el) return;
    const observer = new ResizeObserver(() => {
      if (atEnd.current) virtualizer.scrollToEnd();
    });
    observer.observe(el);
    return () => observer.disconnect();
  }, [shown, virtualizer]);
  // Where the reader is as of their last scroll: a resize fires no scroll
  // event, so the observer above reads where they were before it.
  const onScroll = () => {
    const el = scrollRef.current;
    if (el) atEnd.current = el.scrollHeight - el.scrollTop - el.clientHeight <= AT_END;
  };

  if (messages.length === 0) return <p className="empty">Say something to start the conversation.</p>;
  return (
    <div className="messages" ref={scrollRef} data-testid="messages" data-messages={messages.length} tabIndex={0} aria-label="Messages" onScroll={onScroll}>
      <div style={{ height: virtualizer.getTotalSize(), position: "relative" }}>
        {virtualizer.getVirtualItems().map((item) => {
          const m = messages[item.index];
          return (
            <div
              key={item.key}
              data-index={item.index}
              ref={virtualizer.measureElement}
              className="messages-item"
              style={{ position: "absolute", top: 0, left: 0, right: 0, transform: `translateY(${item.start}px)` }}
            >
              {m.role === "user" ? (
                <div className="message message-user" data-testid="message" data-role="user" data-status={m.status}>
                  <div className="message-head">
                    <span className="message-who">You</span>
                    {m.status !== "sent" && <StatusBadge status={m.status} />}
                  </div>
                  <div className="message-text">{m.text}</div>
                </div>
              ) : (
                <AgentReply message={m} />
              )}
            </div>
          );
        })}
      </div>
    </div>
  );
}
