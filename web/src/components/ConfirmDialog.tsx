// A modal question before something that cannot be undone: the browser's own
// <dialog> opened as a modal, so focus stays in it, the page behind is inert
// and Escape dismisses it. Focus starts on the safe choice.
import { useEffect, useId, useRef } from "react";

export function ConfirmDialog({
  title,
  message,
  confirmLabel,
  dismissLabel,
  busy = false,
  onConfirm,
  onDismiss,
}: {
  title: string;
  message: string;
  confirmLabel: string;
  dismissLabel: string;
  busy?: boolean;
  onConfirm: () => void;
  onDismiss: () => void;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  const id = useId();
  useEffect(() => {
    const d = ref.current;
    if (d && !d.open) d.showModal();
    return () => d?.close();
  }, []);
  return (
    <dialog
      ref={ref}
      className="dialog confirm-dialog"
      aria-labelledby={`${id}-title`}
      aria-describedby={`${id}-message`}
      onCancel={(e) => {
        e.preventDefault();
        onDismiss();
      }}
      data-testid="confirm-dialog"
    >
      <h2 id={`${id}-title`}>{title}</h2>
      <p id={`${id}-message`}>{message}</p>
      <div className="actions">
        <button type="button" className="btn" autoFocus onClick={onDismiss} data-testid="confirm-dismiss">
          {dismissLabel}
        </button>
        <button type="button" className="btn btn-danger" disabled={busy} onClick={onConfirm} data-testid="confirm-ok">
          {confirmLabel}
        </button>
      </div>
    </dialog>
  );
}
