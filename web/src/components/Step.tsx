// One transcript step, as the Workers page's transcript and a conversation's
// replies show it: the agent's text as markdown, tool calls as collapsible
// blocks (name and truncated args), tool results monospace and collapsible.
import type { ActionContent, TranscriptStep } from "@/api/types";
import { Markdown } from "@/components/Markdown";

const LONG_RESULT_CHARS = 600;
const LONG_RESULT_LINES = 12;

/** The shortest readable form of a tool call's arguments. */
export function argsSummary(args: string): string {
  let text = args;
  try {
    const v: unknown = JSON.parse(args);
    if (v && typeof v === "object" && !Array.isArray(v)) {
      const values = Object.values(v as Record<string, unknown>);
      if (values.length === 1 && typeof values[0] === "string") text = values[0];
    }
  } catch {
    /* not JSON: show as is */
  }
  const line = text.replace(/\s+/g, " ").trim();
  return line.length > 100 ? `${line.slice(0, 100)}…` : line;
}

function prettyArgs(args: string): string {
  try {
    return JSON.stringify(JSON.parse(args), null, 2);
  } catch {
    return args;
  }
}

function ToolCall({ call }: { call: Extract<ActionContent, { type: "tool_call" }> }) {
  return (
    <details className="tool-call" data-testid="tool-call">
      <summary>
        <span className="tool-icon" aria-hidden="true">
          ▶
        </span>
        <span className="tool-name">{call.name}</span>
        <code className="tool-args">{argsSummary(call.args)}</code>
      </summary>
      <pre className="mono">{prettyArgs(call.args)}</pre>
    </details>
  );
}

function ToolResult({ step }: { step: Extract<TranscriptStep, { type: "tool_result" }> }) {
  const long = step.text.length > LONG_RESULT_CHARS || step.text.split("\n").length > LONG_RESULT_LINES;
  const first = step.text.split("\n", 1)[0];
  return (
    <details className="tool-result" open={!long} data-testid="tool-result">
      <summary>
        <span className="tool-icon ok" aria-hidden="true">
          ✓
        </span>
        <span className="tool-name">{step.name}</span>
        {long && <code className="tool-args">{first.length > 100 ? `${first.slice(0, 100)}…` : first}</code>}
      </summary>
      <pre className="mono">{step.text}</pre>
    </details>
  );
}

export function Step({ step }: { step: TranscriptStep }) {
  if (step.type === "tool_result") return <ToolResult step={step} />;
  return (
    <div className="action">
      {step.content.map((c, i) => (c.type === "text" ? <Markdown key={i} text={c.text} /> : <ToolCall key={i} call={c} />))}
    </div>
  );
}
