// A running run's transcript as it grows: the steps stored so far, then each
// new one as the event stream announces it. "Follow" (on at first) keeps the
// newest step in view; scrolling up turns it off, pressing it again turns it
// back on. Until the run has a step, the Workers page contract's note stands.
import { useState } from "react";
import { useRunSteps } from "@/api/runSteps";
import { Transcript } from "@/components/Transcript";

export function LiveTranscript({ runId, className }: { runId: string; className?: string }) {
  const steps = useRunSteps(runId);
  const [follow, setFollow] = useState(true);
  const list = steps.data?.steps ?? [];
  if (list.length === 0) {
    return (
      <p className="muted" data-testid="transcript-pending">
        {steps.isError ? `Could not load the steps so far: ${steps.error.message}` : "Transcript available when worker completes."}
      </p>
    );
  }
  return (
    <section className={`detail-transcript live-transcript ${className ?? ""}`} aria-label="Live transcript" data-testid="live-transcript">
      <div className="live-transcript-head">
        <h3>
          Transcript <span className="muted">(live, {list.length} {list.length === 1 ? "step" : "steps"})</span>
        </h3>
        <button
          type="button"
          className={`btn btn-small${follow ? " btn-active" : ""}`}
          aria-pressed={follow}
          onClick={() => setFollow((f) => !f)}
          data-testid="follow-toggle"
          title="Keep the newest step in view"
        >
          Follow
        </button>
      </div>
      <Transcript steps={list} follow={follow} onScrollAway={() => setFollow(false)} />
    </section>
  );
}
