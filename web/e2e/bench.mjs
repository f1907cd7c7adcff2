// Benchmark: the Workers page with 100,000 runs and a 2,000-step transcript
// against the same page with 100 runs and a 30-step transcript, in the same
// run, in real Chromium against the real server (debug or release binary).
//
// For each side, a fresh server (SQLite) gets one run through the public API
// (register a worker, create a task, claim it, append the steps, complete it:
// the server compacts the steps into the gzipped blob), then the filler runs
// are bulk-inserted with the sqlite3 CLI while the server is stopped (the
// store's own schema; far too many for the API in a benchmark's time), and
// the server is started again. Each round opens a new browser context (cold
// cache) at /agents/bench/workers?worker=<the transcript run> and records,
// from navigation start, when the first card and the first transcript step
// are in the DOM. Rounds alternate between the two sides; medians are printed.
//
//   cargo build -p shepherd && npm run build && npm run bench
//   BENCH_ROUNDS=9 SHEPHERD_BIN=target/release/shepherd npm run bench
import { spawnSync } from "node:child_process";
import { statSync } from "node:fs";
import { join } from "node:path";
import { apiCall, launchBrowser, makeWorkspace, startServer, writeConfig } from "./lib.mjs";

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 7);
const SIDES = [
  { name: "baseline", runs: 100, steps: 30 },
  { name: "large", runs: 100_000, steps: 2_000 },
];

function step(i) {
  const n = Math.floor(i / 2);
  if (i % 2 === 0) {
    return {
      type: "action",
      content: [
        { type: "text", text: `Step ${n}: checking the **module ${n % 17}** before changing it.` },
        { type: "tool_call", id: `shell:${n}`, name: "shell", args: JSON.stringify({ command: `grep -rn "fn item_${n}" src/ | head -n 20` }) },
      ],
    };
  }
  const lines = Array.from({ length: 8 }, (_, k) => `src/module_${(n + k) % 17}.rs:${10 + k * 7}: pub fn item_${n}_${k}() -> Result<(), Error> {`);
  return { type: "tool_result", call_id: `shell:${n}`, name: "shell", text: lines.join("\n") };
}

async function prepare(side) {
  const ws = makeWorkspace();
  const config = writeConfig(ws, { agents: false });
  let server = await startServer(ws, { config });
  const reg = await apiCall(server, "POST", "/api/v1/worker/orchestrator/register", {
    worker_id: "bench-worker",
    agent_id: "bench",
    capabilities: ["bench"],
    max_concurrent: 1,
  });
  const task = await apiCall(server, "POST", "/api/v1/tasks", { title: `Transcript of ${side.steps} steps`, agent_id: "bench", capabilities: ["bench"] });
  const headers = { authorization: `Bearer ${reg.worker_token}`, "content-type": "application/json" };
  const post = async (path, body) => {
    const res = await fetch(server.url + path, { method: "POST", headers, body: JSON.stringify(body) });
    if (!res.ok) throw new Error(`${path}: ${res.status} ${await res.text()}`);
    return res.json();
  };
  const claim = await post(`/api/v1/worker/orchestrator/tasks/${task.vtid}/claim`, {});
  for (let start = 0; start < side.steps; start += 1000) {
    const steps = Array.from({ length: Math.min(1000, side.steps - start) }, (_, k) => step(start + k));
    await post(`/api/v1/runs/${claim.run_id}/steps`, { claim_token: claim.claim_token, start_index: start, steps });
  }
  for (const event of ["worker.execution.started", "worker.execution.completed"]) {
    await post(`/api/v1/worker/orchestrator/tasks/${task.vtid}/progress`, { event, message: event, claim_token: claim.claim_token });
  }
  const detail = await apiCall(server, "GET", `/api/agents/workers/detail?worker_id=${claim.run_id}`);
  if (detail.transcript?.length !== side.steps) throw new Error(`expected ${side.steps} steps, got ${detail.transcript?.length}`);
  const port = server.port;
  await server.stop();

  // Filler runs, older than the transcript run, 1 in 10 failed.
  const filler = side.runs - 1;
  const t0 = Date.parse(detail.started_at) - 1000;
  const sql = `
BEGIN;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${filler})
INSERT INTO tasks (id, title, spec, priority, capabilities, agent_id, workflow, state, attempts, created_at, updated_at)
SELECT printf('BENCH-%07d', i), printf('Filler task %d: inspect the workspace', i), '', 0, '["bench"]', 'bench', 'simple',
       CASE WHEN i % 10 = 0 THEN 'failed' ELSE 'done' END, 1, ${t0} - i * 1000, ${t0} - i * 1000 FROM n;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${filler})
INSERT INTO runs (id, task_id, task, worker_id, agent_id, worker_type, attempt, purpose, status, result, started_at, completed_at, has_transcript)
SELECT printf('00000000-0000-7000-8000-%012d', i), printf('BENCH-%07d', i), printf('Filler task %d: inspect the workspace', i),
       'bench-worker', 'bench', 'builtin', 1, 'build', CASE WHEN i % 10 = 0 THEN 'failed' ELSE 'done' END, 'ok',
       ${t0} - i * 1000, ${t0} - i * 1000 + 500, 0 FROM n;
DELETE FROM run_counts;
INSERT INTO run_counts (agent_id, status, n) SELECT agent_id, status, COUNT(*) FROM runs GROUP BY agent_id, status;
COMMIT;
`;
  const db = join(ws.data, "shepherd.db");
  const out = spawnSync("sqlite3", [db], { input: sql, encoding: "utf8" });
  if (out.status !== 0) throw new Error(`sqlite3 failed (is the sqlite3 CLI installed?): ${out.stderr}`);
  server = await startServer(ws, { config, port });
  const list = await apiCall(server, "GET", "/api/agents/workers?agent_id=bench&limit=1");
  if (list.total !== side.runs) throw new Error(`expected ${side.runs} runs, the server counts ${list.total}`);
  return { ...side, server, runId: claim.run_id, dbBytes: statSync(db).size };
}

const OBSERVE = () => {
  const marks = {};
  window.__marks = marks;
  new MutationObserver(() => {
    if (!marks.card && document.querySelector('[data-testid="worker-card"]')) marks.card = performance.now();
    if (!marks.step && document.querySelector('[data-testid="transcript"] .step')) marks.step = performance.now();
  }).observe(document, { subtree: true, childList: true });
};

async function measure(browser, side) {
  const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await ctx.newPage();
  await page.addInitScript(OBSERVE);
  await page.goto(`${side.server.url}/agents/bench/workers?worker=${side.runId}`);
  await page.waitForFunction(() => window.__marks?.card && window.__marks?.step, null, { timeout: 60_000 });
  const marks = await page.evaluate(() => window.__marks);
  await ctx.close();
  return marks;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const sides = [];
try {
  for (const side of SIDES) {
    const started = Date.now();
    sides.push(await prepare(side));
    console.log(`prepared ${side.name}: ${side.runs} runs, ${side.steps}-step transcript in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  }
  const browser = await launchBrowser();
  const results = new Map(sides.map((s) => [s.name, { card: [], step: [] }]));
  for (const s of sides) await measure(browser, s); // warm-up, not counted
  for (let r = 0; r < ROUNDS; r++) {
    for (const s of r % 2 === 0 ? sides : [...sides].reverse()) {
      const m = await measure(browser, s);
      results.get(s.name).card.push(m.card);
      results.get(s.name).step.push(m.step);
    }
  }
  await browser.close();
  console.log(`\nWorkers page, ${ROUNDS} rounds, median ms from navigation start (cold browser cache)`);
  console.log("side       runs     steps  db MB   first card  first transcript step");
  for (const s of sides) {
    const r = results.get(s.name);
    console.log(
      `${s.name.padEnd(10)} ${String(s.runs).padEnd(8)} ${String(s.steps).padEnd(6)} ${(s.dbBytes / 1e6).toFixed(1).padStart(5)}   ${median(r.card).toFixed(0).padStart(8)}    ${median(r.step).toFixed(0).padStart(8)}`,
    );
  }
  const [a, b] = sides.map((s) => results.get(s.name));
  const cardRatio = median(b.card) / median(a.card);
  const stepRatio = median(b.step) / median(a.step);
  console.log(`\nratio large/baseline: first card ${cardRatio.toFixed(2)}x, first transcript step ${stepRatio.toFixed(2)}x (goal: within 1.5x, first card under 1000 ms)`);
} finally {
  for (const s of sides) await s.server.stop();
}
