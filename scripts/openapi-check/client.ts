// A small client written against the types openapi-typescript generates
// from /api/openapi.json. It is only type-checked (tsc --noEmit): if the
// document loses a field, a status or a vocabulary, this stops compiling.
import type { components, paths } from "./schema";

type Json<R> = R extends { content: { "application/json": infer T } } ? T : never;

type SeedList = Json<paths["/api/agents/workers"]["get"]["responses"][200]>;
type SeedDetail = Json<paths["/api/agents/workers/detail"]["get"]["responses"][200]>;
type Claim = paths["/api/v1/worker/orchestrator/tasks/{vtid}/claim"]["post"];
type ClaimOk = Json<Claim["responses"][200]>;
type ClaimRefused = Json<Claim["responses"][409]>;
type Heartbeat = Json<paths["/api/v1/worker/orchestrator/heartbeat"]["post"]["responses"][200]>;
type Workers = Json<paths["/api/v1/workers"]["get"]["responses"][200]>;
type WorkerEvents = Json<paths["/api/v1/worker_events"]["get"]["responses"][200]>;
type Step = components["schemas"]["TranscriptStep"];
type RunStatus = components["schemas"]["RunStatus"];

const finished: RunStatus[] = ["done", "failed", "cancelled"];

export function line(list: SeedList): string[] {
    return list.workers.map(
        (w) => `${w.id} ${w.status} ${w.worker_type} ${w.channel_name ?? "-"} ${w.live_status ?? ""} ${w.tool_calls}`,
    );
}

export function stepText(s: Step): string {
    if (s.type === "action") {
        return s.content.map((c) => (c.type === "text" ? c.text : `${c.name}(${c.args})`)).join(" ");
    }
    return `${s.name}: ${s.text}`;
}

export function transcript(d: SeedDetail): string {
    const done = finished.includes(d.status);
    return `${d.task} ${done ? d.result ?? "" : "running"}\n${(d.transcript ?? []).map(stepText).join("\n")}`;
}

export function claimed(c: ClaimOk): string {
    return `${c.vtid} ${c.run_id} ${c.claim_token} ${c.purpose} ${c.claim_expires_at}`;
}

export function refused(e: ClaimRefused): string {
    return `${e.error.code}: ${e.error.message} (ok=${e.ok}, claimed=${e.claimed}, ${e.reason})`;
}

export function cancelRequested(h: Heartbeat): string[] {
    return h.claims.filter((c) => c.cancel_requested).map((c) => c.run_id);
}

export function recovered(w: Workers): string[] {
    return w.workers.filter((x) => x.source === "event_log").map((x) => `${x.worker_id} ${x.recovered_at}`);
}

export function started(e: WorkerEvents): number[] {
    return e.events.filter((x) => x.type === "worker_started").map((x) => x.id);
}

// Events: `type` narrows `data` to that type's payload, on the JSON page and
// in each SSE frame's data.
type EventPage = Json<paths["/api/v1/events"]["get"]["responses"][200]>;
type StreamData = components["schemas"]["StreamData"];

export function describe(e: EventPage["events"][number]): string {
    switch (e.type) {
        case "task.state_changed":
            return `${e.task_id ?? ""} ${e.data.from} -> ${e.data.to} (${e.data.cause})`;
        case "run.step":
            return `${e.run_id ?? ""} #${e.seq} step ${e.data.index} ${e.data.tool_name ?? ""}`;
        case "worker.claim.expired":
        case "worker.claim.released":
            return `${e.data.claim_id} ${e.data.purpose}: ${e.data.reason}`;
        case "worker.execution.failed":
            return `failed: ${e.data.message ?? ""} (${e.data.external ? "outside" : "worker"})`;
        case "run.usage":
            return `${e.data.usage.input_tokens} in, ${e.data.usage.output_tokens} out`;
        default:
            return e.type;
    }
}

export function frame(d: StreamData): string {
    return "type" in d ? describe(d) : `resync after ${d.cursor}: ${d.reason}`;
}
