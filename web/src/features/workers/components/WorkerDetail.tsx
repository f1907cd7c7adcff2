// The right column: the selected run's header, result and transcript; for a
// running run, its live status, active tool and tool-call count; and what the
// run asked people (input requests), with a marker while any waits.
import type { WorkerDetailResponse } from "@/api/types";
import { Badge, StatusBadge } from "@/components/StatusBadge";
import { Markdown } from "@/components/Markdown";
import { duration, useNow } from "@/components/time";
import { ApiError } from "@/api/errors";
import { useInputRequests } from "@/api/inputRequests";
import { RunInputRequests, WaitingForYou } from "@/components/RunInputRequests";
import { Transcript } from "@/components/Transcript";
import { LiveTranscript } from "@/components/LiveTranscript";
import { useRunRecord, useWorkerDetail, type WorkerDetail as Detail } from "@/features/workers/api/workers";
import { useLive } from "@/features/workers/stores/live";

function Duration({ run }: { run: WorkerDetailResponse }) {
  const now = useNow();
  const end = run.completed_at ? Date.parse(run.completed_at) : now;
  return <>{duration(end - Date.parse(run.started_at))}</>;
}

export function WorkerDetail({ agentId, workerId }: { agentId: string; workerId: string | undefined }) {
  const detail = useWorkerDetail(agentId, workerId);
  if (!workerId) {
    return (
      <div className="empty" data-testid="detail-empty">
        Select a worker to view details
      </div>
    );
  }
  if (detail.isPending) return <div className="empty">Loading…</div>;
  if (detail.isError) {
    const e = detail.error;
    return (
      <div className="empty error" role="alert">
        {e instanceof ApiError && e.status === 404 ? "This worker run does not exist." : `Could not load this run: ${e.message}`}
      </div>
    );
  }
  return <DetailBody detail={detail.data} />;
}

function DetailBody({ detail }: { detail: Detail }) {
  const run = useLive(detail.id, detail, detail.cursor);
  const running = run.status === "running";
  const requests = useInputRequests({ runId: run.id, limit: 100 }).data ?? [];
  const waiting = requests.filter((r) => r.state === "pending").length;
  const attempt = useRunRecord(run.id, run.vtid).data?.attempt;
  return (
    <article className="worker-detail" data-testid="worker-detail" data-worker-id={run.id} data-run-status={run.status}>
      <header className="detail-header">
        <h2 className="detail-task">
          <span className="muted">Task:</span> {run.task}
        </h2>
        <div className="detail-meta">
          <span>
            <span className="muted">Channel:</span> {run.channel_name ?? run.channel_id ?? "none"}
          </span>
          <Badge tone="neutral" title="worker type">
            {run.worker_type}
          </Badge>
        </div>
        <div className="detail-meta">
          <span>
            <span className="muted">Duration:</span> <Duration run={run} />
          </span>
          <StatusBadge status={run.status} />
          <span className="muted">{run.vtid}</span>
          {attempt != null && (
            <span className="muted" data-testid="run-attempt">
              attempt {attempt}
            </span>
          )}
        </div>
        <WaitingForYou count={waiting} />
      </header>
      {requests.length > 0 && (
        <section className="detail-requests" aria-label="Requests for a person">
          <h3>Requests for a person</h3>
          <RunInputRequests requests={requests} />
        </section>
      )}
      {running ? (
        <section className="detail-live" aria-label="Live status" data-testid="live-panel">
          <dl className="live-grid">
            <dt>Status</dt>
            <dd data-testid="live-status">{run.live_status ?? "starting"}</dd>
            <dt>Active tool</dt>
            <dd data-testid="active-tool">{run.active_tool ?? "none"}</dd>
            <dt>Tool calls</dt>
            <dd data-testid="tool-calls">{run.tool_calls}</dd>
          </dl>
          <LiveTranscript key={run.id} runId={run.id} />
        </section>
      ) : (
        <>
          {run.result && (
            <section className="detail-result" aria-label="Result" data-testid="result" tabIndex={0}>
              <h3>Result</h3>
              <Markdown text={run.result} />
            </section>
          )}
          {run.transcript && run.transcript.length > 0 ? (
            <section className="detail-transcript" aria-label="Transcript section">
              <h3>Transcript</h3>
              <Transcript steps={run.transcript} />
            </section>
          ) : (
            <p className="muted" data-testid="no-transcript">
              Full transcript not available for this worker
            </p>
          )}
        </>
      )}
    </article>
  );
}
