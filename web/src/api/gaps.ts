// Hand-written types for response bodies that /api/openapi.json still
// describes as a bare `object`. Each mirrors the server's JSON exactly; once
// the document types a route, its entry here goes and schema.d.ts is used.
import type { components } from "./schema";

export type WorkerRunInfo = components["schemas"]["WorkerRunInfo"];
export type WorkerListResponse = components["schemas"]["WorkerListResponse"];

/** Seed 000's transcript step format. */
export type ActionContent =
  | { type: "text"; text: string }
  | { type: "tool_call"; id: string; name: string; args: string };

export type TranscriptStep =
  | { type: "action"; content: ActionContent[] }
  | { type: "tool_result"; call_id: string; name: string; text: string };

export type WorkerDetailResponse = Omit<components["schemas"]["WorkerDetailResponse"], "transcript"> & {
  transcript?: TranscriptStep[] | null;
};

export interface Agent {
  id: string;
  worker_type: string;
  capabilities: string[];
  max_concurrent: number | null;
  source: string;
  created_at: string;
  running: number;
}

export interface Task {
  vtid: string;
  title: string;
  spec: string;
  priority: number;
  capabilities: string[];
  agent_id: string | null;
  channel_id: string | null;
  workflow: string;
  state: string;
  spec_snapshot_id: string | null;
  dispatched_at: string | null;
  builder_worker_id: string | null;
  cancel_requested_at: string | null;
  attempts: number;
  created_at: string;
  updated_at: string;
}

export interface Claim {
  id: string;
  vtid: string;
  worker_id: string;
  run_id: string;
  purpose: string;
  claimed_at: string;
  expires_at: string;
  released_at: string | null;
  release_reason: string | null;
}

/** An event as the log stores it (task detail, event pages). */
export interface LogEvent {
  seq: number;
  ts: string;
  type: string;
  data: Record<string, unknown>;
  agent_id?: string;
  worker_id?: string;
  task_id?: string;
  run_id?: string;
  channel_id?: string;
  conversation_id?: string;
  session_id?: string;
}

export interface TaskList {
  tasks: Task[];
  total: number;
}

export type TaskDetail = Task & { claims: Claim[]; events: LogEvent[] };

export interface Transition {
  event_types: string[];
  from_states: string[];
  to_state: string;
  trigger_action?: string;
  description: string;
}

export interface Workflow {
  name: string;
  draft_state: string;
  dispatched_state: string;
  claimed_state: string;
  review_state?: string;
  final_states: string[];
  states: string[];
  transitions: Transition[];
}

/** Seed 001's list_workers entry. */
export interface FleetWorker {
  worker_id: string;
  session_id: string | null;
  name: string | null;
  project_path: string | null;
  terminal_id: string | null;
  agent_type: string;
  agent_id: string;
  worker_type: string;
  status: "spawning" | "ready" | "busy" | "closed";
  registry_status: string;
  created_at: string;
  last_activity: string;
  last_heartbeat_at: string;
  capabilities: string[];
  max_concurrent: number;
  active_claims: number;
  source: "registry" | "event_log";
  event_state: "idle" | "active" | "closed";
  recovered_at: string | null;
  last_event_ts: string | null;
}

/** Seed 001's worker_events response. */
export interface WorkerEventsResponse {
  events: { id: number; ts: string; type: string; worker_id: string | null; data: Record<string, unknown> }[];
  count: number;
  next_cursor: number;
  summary?: {
    started: string[];
    closed: string[];
    idle: string[];
    active: string[];
    stuck: string[];
    last_event_ts: string | null;
  };
}

export interface RunRecord {
  id: string;
  vtid: string;
  task: string;
  worker_id: string;
  agent_id: string;
  status: string;
  purpose: string;
  attempt: number;
  started_at: string;
  completed_at: string | null;
  result: string | null;
}
