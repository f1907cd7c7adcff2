// The send box of the active conversation: disabled with a cancel button
// while the agent works; for an older conversation, "Continue this
// conversation" instead, which asks first when another conversation of the
// resource is still replying (continuing cancels that reply, as New chat
// does).
import { useState, type FormEvent } from "react";
import type { ConversationDetail, ConversationInfo } from "@/api/types";
import { ConfirmDialog } from "@/components/ConfirmDialog";
import { useConversationActions } from "@/features/conversations/api/conversations";

export function Composer({
  detail,
  resourceId,
  replying,
}: {
  detail: ConversationDetail;
  resourceId: string;
  /** Another conversation of the resource whose reply is under way. */
  replying?: ConversationInfo;
}) {
  const { send, cancel, activate } = useConversationActions(resourceId);
  const [text, setText] = useState("");
  const [asking, setAsking] = useState(false);
  const busy = detail.state !== "idle";
  if (!detail.active) {
    const proceed = () => activate.mutate(detail.id, { onSettled: () => setAsking(false) });
    return (
      <div className="composer composer-history" data-testid="history-note">
        <span className="muted">You are reading an older conversation.</span>
        <button
          type="button"
          className="btn btn-primary btn-small"
          onClick={() => (replying ? setAsking(true) : proceed())}
          disabled={activate.isPending}
          data-testid="continue-btn"
        >
          Continue this conversation
        </button>
        {asking && replying && (
          <ConfirmDialog
            title="Stop the other reply?"
            message={`"${replying.title ?? "Another conversation"}" is still being answered. Continuing this conversation cancels that reply; what it wrote so far is kept.`}
            confirmLabel="Cancel it and continue"
            dismissLabel="Keep it running"
            busy={activate.isPending}
            onConfirm={proceed}
            onDismiss={() => setAsking(false)}
          />
        )}
        {activate.error && (
          <p className="error" role="alert">
            {activate.error.message}
          </p>
        )}
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
