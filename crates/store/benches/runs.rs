//! Runs-list latency with and without transcript blobs, and transcript
//! compression, on SQLite and PostgreSQL.
//!
//! What it measures:
//!
//! 1. Compression: a corpus of generated, realistic ~30-step transcripts
//!    (prose reasoning, tool calls, cargo build/test logs, `ls -la`, unified
//!    diffs, numbered file dumps, grep hits, git logs, JSON tool outputs) is
//!    packed with `shepherd_core::transcript::compress`; the raw JSON size,
//!    the gzipped size and the ratio are reported overall and per transcript
//!    (min / median / max).
//! 2. List latency: `Store::list_runs` for one agent, 50 a page (the query
//!    behind `GET /api/agents/workers`), plus a `status = done` variant and an
//!    `offset = 5000` variant. Each is timed at 100,000 and then 1,000,000
//!    runs on two databases populated identically in the same run: one whose
//!    finished runs carry a gzipped transcript blob (drawn round-robin from
//!    the corpus) in `run_transcripts` and `has_transcript = 1`, one with
//!    `has_transcript = 0` everywhere and `run_transcripts` empty. Calls
//!    alternate between the two databases in rounds, after an untimed
//!    warm-up; p50, p99, max and mean are printed, with a raw-driver
//!    breakdown of the two statements the call makes (the total, summed from
//!    `run_counts`, and the deferred-join page) and their query plans
//!    (`EXPLAIN QUERY PLAN` / `EXPLAIN (ANALYZE, BUFFERS)`).
//!
//! Population bypasses the store API (far too slow for a million runs): a
//! `Store` is opened once so its migrations create the schema, then agents,
//! channels, workers, tasks, runs and transcripts are bulk-inserted with the
//! raw driver: SQLite in one transaction with prepared statements (journal
//! off during the load, WAL restored and the file synced before timing),
//! PostgreSQL with binary `COPY` (see `pg_load` for a load-only shortcut
//! that leaves the stored bytes unchanged), followed by `VACUUM (ANALYZE)`
//! of `runs` and `run_counts` (standing in for autovacuum; autovacuum itself
//! is switched off on `runs` and `run_transcripts` of the throwaway schema
//! so it cannot start in the middle of the timings). After each load the
//! `run_counts` counters are rebuilt from the rows (`GROUP BY agent_id,
//! status`), as the store keeps them. The 1,000,000-run table is the
//! 100,000-run table grown by 900,000 newer runs. Population time is printed.
//!
//! Run (release mode):
//!
//! ```text
//! cargo bench -p shepherd-store --bench runs
//! ```
//!
//! Arguments after `--` pick sections: `compression`, `sqlite`, `postgres`
//! (default: all), e.g. `cargo bench -p shepherd-store --bench runs -- sqlite`.
//!
//! Environment:
//! - `SHEPHERD_BENCH_SCALE` (float, default 1.0) scales the row counts
//!   (1.0: 100,000 and 1,000,000 runs);
//! - `SHEPHERD_BENCH_PG_URL` (default `postgres://postgres@127.0.0.1:5432/test`);
//!   PostgreSQL is skipped with a message if it cannot be reached;
//! - `SHEPHERD_BENCH_KEEP=1` keeps the databases (SQLite files, PostgreSQL
//!   schemas) for inspection and prints where they are.
//!
//! SQLite databases live in `/tmp/shepherd-bench-runs-<unique>/`, PostgreSQL
//! ones in fresh schemas `bench_<unique>_blob` / `bench_<unique>_plain`; all
//! are removed at the end.

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::time::{Duration, Instant};

use serde_json::json;
use shepherd_core::transcript::{self, ActionContent, TranscriptStep};
use shepherd_store::{RunFilter, Store, StoreConfig};
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, NoTls};

type BenchResult<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

// ----- parameters -----

/// Row counts before `SHEPHERD_BENCH_SCALE`.
const SMALL_RUNS: f64 = 100_000.0;
const LARGE_RUNS: f64 = 1_000_000.0;
const AGENTS: [&str; 4] = ["builder", "reviewer", "planner", "fixer"];
const WORKERS: usize = 240;
const TASKS: usize = 400;
const CHANNELS: usize = 6;
/// Distinct transcripts; blobs are reused round-robin.
const TRANSCRIPTS: usize = 50;
/// Timed `list_runs` calls per query variant and database.
const CALLS: usize = 500;
/// Untimed calls per variant and database before the timed ones.
const WARMUP: usize = 25;
/// Calls in a row on one database before switching to the other.
const ROUND: usize = 25;
/// Fewest timed calls when a query is so slow that `CALLS` would not fit
/// in `BUDGET` (the count actually made is printed).
const MIN_CALLS: usize = 10;
/// Time allowed for the timed calls of one query on one table.
const BUDGET: Duration = Duration::from_secs(6);
/// Time allowed for the warm-up of one query on one table (at least 2 calls).
const WARMUP_BUDGET: Duration = Duration::from_millis(1500);
/// Raw-driver calls per statement in the breakdown (fewer if slow).
const BREAKDOWN_CALLS: usize = 60;
const BREAKDOWN_BUDGET: Duration = Duration::from_secs(2);
const PAGE: i64 = 50;
/// Average gap between two run starts (runs are spread over time).
const RUN_SPACING_MS: i64 = 15_000;
const GOAL_P99_MS: f64 = 10.0;
const SEED: u64 = 0x5348_4550_4845_5244;

/// The list query variants.
struct Variant {
    name: &'static str,
    status: Option<&'static str>,
    offset: i64,
}

const VARIANTS: [Variant; 3] = [
    Variant {
        name: "agent",
        status: None,
        offset: 0,
    },
    Variant {
        name: "agent+status=done",
        status: Some("done"),
        offset: 0,
    },
    Variant {
        name: "agent offset 5000",
        status: None,
        offset: 5000,
    },
];

const STATUSES: [&str; 4] = ["running", "done", "failed", "cancelled"];

// ----- a small deterministic random generator -----

/// SplitMix64's output function.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(mix(seed))
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }
    /// Uniform in `0..n` (n > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// Uniform in `lo..hi` (hi > lo).
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo)
    }
    fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
    fn hex(&mut self, n: usize) -> String {
        const DIGITS: &[u8] = b"0123456789abcdef";
        (0..n)
            .map(|_| DIGITS[self.below(16) as usize] as char)
            .collect()
    }
    fn base62(&mut self, n: usize) -> String {
        const DIGITS: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
        (0..n)
            .map(|_| DIGITS[self.below(62) as usize] as char)
            .collect()
    }
    /// A version-4-shaped UUID.
    fn uuid(&mut self) -> String {
        let (a, b) = (self.next(), self.next());
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            0x8000 | ((b >> 48) & 0x3fff),
            b & 0xffff_ffff_ffff
        )
    }
}

// ----- realistic transcripts -----

const CRATES: &[&str] = &[
    "shepherd-core",
    "shepherd-store",
    "shepherd-api",
    "shepherd",
    "serde",
    "serde_json",
    "serde_derive",
    "tokio",
    "tokio-util",
    "tokio-stream",
    "tokio-postgres",
    "postgres-protocol",
    "postgres-types",
    "deadpool-postgres",
    "rusqlite",
    "libsqlite3-sys",
    "axum",
    "axum-core",
    "tower",
    "tower-http",
    "hyper",
    "hyper-util",
    "http",
    "http-body",
    "h2",
    "bytes",
    "futures-util",
    "futures-core",
    "mio",
    "socket2",
    "chrono",
    "uuid",
    "flate2",
    "miniz_oxide",
    "crc32fast",
    "sha2",
    "digest",
    "tracing",
    "tracing-subscriber",
    "tracing-core",
    "regex",
    "regex-automata",
    "memchr",
    "aho-corasick",
    "itoa",
    "ryu",
    "proc-macro2",
    "quote",
    "syn",
    "thiserror",
    "thiserror-impl",
    "clap",
    "clap_derive",
    "toml",
    "toml_edit",
    "reqwest",
    "utoipa",
    "getrandom",
    "libc",
    "cc",
    "pin-project-lite",
    "smallvec",
    "parking_lot",
    "once_cell",
    "indexmap",
    "hashbrown",
];

const FILES: &[&str] = &[
    "crates/store/src/ops/runs.rs",
    "crates/store/src/ops/tasks.rs",
    "crates/store/src/ops/claims/mod.rs",
    "crates/store/src/ops/claims/grant.rs",
    "crates/store/src/ops/claims/report.rs",
    "crates/store/src/ops/claims/lease.rs",
    "crates/core/src/claiming.rs",
    "crates/store/src/ops/workers.rs",
    "crates/store/src/log.rs",
    "crates/store/src/hub.rs",
    "crates/store/src/sqlite/mod.rs",
    "crates/store/src/postgres/mod.rs",
    "crates/store/src/lib.rs",
    "crates/core/src/transcript.rs",
    "crates/core/src/workflow.rs",
    "crates/core/src/event.rs",
    "crates/core/src/model.rs",
    "crates/api/src/routes/runs.rs",
    "crates/api/src/routes/tasks.rs",
    "crates/api/src/auth.rs",
    "crates/shepherd/src/main.rs",
    "crates/store/tests/event_log.rs",
    "crates/api/tests/workers.rs",
    "web/src/components/RunList.tsx",
];

const FUNCTIONS: &[&str] = &[
    "list_runs",
    "append_steps",
    "finish_run",
    "heartbeat",
    "claim_next",
    "sweep_expired",
    "dispatch_task",
    "register_worker",
    "compress",
    "decompress",
    "truncate_utf8",
    "close_dangling_tool_calls",
    "read_after",
    "prune_chunk",
    "parse_database_url",
    "run_from_row",
    "apply_event",
    "set_state",
    "emit",
    "fence_run",
    "active_for_run",
    "worker_for_token",
    "hash_token",
    "new_uuid",
    "spawn_pump",
    "publish",
    "tail_from",
];

const TYPES: &[&str] = &[
    "Run",
    "Task",
    "Worker",
    "Claim",
    "Store",
    "RunFilter",
    "TranscriptStep",
    "EventRefs",
    "Error",
    "Value",
    "Row",
    "Grant",
    "LeaseRules",
    "StepsAck",
    "TaskDetail",
    "Millis",
    "EventPage",
    "HeldClaim",
];

const FIELDS: &[&str] = &[
    "run_id",
    "task_id",
    "worker_id",
    "agent_id",
    "status",
    "started_at",
    "completed_at",
    "attempt",
    "step_count",
    "tool_calls",
    "lease_ms",
    "claim_token",
    "offset",
    "limit",
    "cursor",
    "expires_at",
    "released_at",
    "channel_id",
    "live_status",
    "active_tool",
    "priority",
    "capabilities",
];

const TABLES: &[&str] = &[
    "runs",
    "tasks",
    "claims",
    "workers",
    "events",
    "run_steps",
    "agents",
    "channels",
];

const PHRASES: &[&str] = &[
    "returns the total alongside the page",
    "keeps the lease fenced by the claim token",
    "closes dangling tool calls before compacting",
    "never selects the transcript blob",
    "emits exactly one event per state change",
    "retries once on a serialization failure",
    "releases the claim when the worker deregisters",
    "orders runs newest first with the id as a tie-breaker",
    "rejects a step batch that leaves a gap",
    "treats a retried batch as duplicates",
    "truncates tool output at 50 KB on a char boundary",
    "publishes the cursor only after the commit is durable",
    "expires leases that missed three heartbeats",
    "keeps the event payload under a kilobyte",
    "maps a unique violation to a conflict",
];

const TEST_SUFFIXES: &[&str] = &[
    "rejects_stale_token",
    "returns_total",
    "is_idempotent",
    "keeps_order",
    "survives_restart",
    "handles_empty_page",
    "respects_limit",
    "expires_lease",
    "closes_dangling_calls",
    "fences_old_claim",
    "emits_one_event",
    "round_trips",
    "fails_on_corrupt_blob",
    "counts_duplicates",
    "paginates_by_cursor",
];

const MONTHS: &[&str] = &[
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

const NAMES: &[&str] = &[
    "Cargo.toml",
    "Cargo.lock",
    "README.md",
    "src",
    "tests",
    "benches",
    "migrations",
    "build.rs",
    ".gitignore",
    "rustfmt.toml",
    "clippy.toml",
    "target",
    "docs",
    "scripts",
    "web",
    "deny.toml",
    "LICENSE",
    "CHANGELOG.md",
    "mod.rs",
    "lib.rs",
];

/// Builds one transcript's text pieces from a random stream.
struct Gen {
    rng: Rng,
}

impl Gen {
    fn code_line(&mut self) -> String {
        let r = &mut self.rng;
        let (f, f2, func, ty) = (
            r.pick(FIELDS),
            r.pick(FIELDS),
            r.pick(FUNCTIONS),
            r.pick(TYPES),
        );
        let line = match r.below(14) {
            0 => format!("let {f} = {func}(&mut db, &{f2}).await?;"),
            1 => format!("if {f}.is_none() {{"),
            2 => format!(
                "return Err(Error::invalid(\"invalid_{f}\", \"{}\"));",
                r.pick(PHRASES)
            ),
            3 => "}".to_owned(),
            4 => format!(
                "db.execute(\"UPDATE {} SET {f} = $2 WHERE id = $1\", params![id, {f}]).await?;",
                r.pick(TABLES)
            ),
            5 => format!("// This {}.", r.pick(PHRASES)),
            6 => format!(
                "pub async fn {func}<D: Db>(db: &mut D, {f}: &str) -> Result<{ty}, Error> {{"
            ),
            7 => format!(".map(|r| r.{f}.clone())"),
            8 => format!("assert_eq!({}.{f}, {});", f2, r.below(500)),
            9 => format!("tracing::debug!({f}, \"{}\");", r.pick(PHRASES)),
            10 => {
                format!("let {f}: Vec<{ty}> = rows.iter().map({func}).collect::<Result<_, _>>()?;")
            }
            11 => format!("{f}: {f2}.{f},"),
            12 => format!("let now = now_ms() - {};", r.below(100_000)),
            _ => String::new(),
        };
        let indent = "    ".repeat(r.below(4) as usize);
        if line.is_empty() {
            line
        } else {
            format!("{indent}{line}")
        }
    }

    fn code_block(&mut self, n: usize) -> Vec<String> {
        (0..n).map(|_| self.code_line()).collect()
    }

    fn version(&mut self) -> String {
        let r = &mut self.rng;
        format!("{}.{}.{}", r.below(3), r.below(40), r.below(30))
    }

    fn date(&mut self) -> String {
        let r = &mut self.rng;
        format!(
            "{} {:>2} {:02}:{:02}",
            r.pick(MONTHS),
            r.range(1, 29),
            r.below(24),
            r.below(60)
        )
    }

    fn sentence(&mut self) -> String {
        let r = &mut self.rng;
        let (file, func, f, f2) = (
            r.pick(FILES),
            r.pick(FUNCTIONS),
            r.pick(FIELDS),
            r.pick(FIELDS),
        );
        match r.below(10) {
            0 => format!(
                "The failing test is `{func}_{}`; it expects `{f}` to be {} but the store returns {}.",
                r.pick(TEST_SUFFIXES),
                r.below(100),
                r.below(100)
            ),
            1 => format!("I'll look at `{file}` to see how `{func}` handles `{f}`."),
            2 => format!(
                "The build passes now; next I need to make sure the `{}` module {}.",
                r.pick(TABLES),
                r.pick(PHRASES)
            ),
            3 => format!(
                "Running the tests for `{}` to check that the change did not break anything else.",
                r.pick(&CRATES[..4])
            ),
            4 => format!(
                "The diff touches {} files; the important part is in `{func}`, which now {}.",
                r.range(1, 6),
                r.pick(PHRASES)
            ),
            5 => format!(
                "Let me check the migration: the `{}` table has an index on ({f}, {f2}), which should cover this query.",
                r.pick(TABLES)
            ),
            6 => format!(
                "That error comes from `{func}` in `{file}`: `{f}` is an `Option<{}>` there, so it has to be unwrapped or defaulted first.",
                r.pick(TYPES)
            ),
            7 => format!(
                "I think the simplest correct fix is to pass `{f}` through to `{func}` instead of recomputing it from `{f2}`."
            ),
            8 => format!(
                "{} tests passed and {} failed; the failure is the same assertion as before, so my last edit did not reach that path.",
                r.range(10, 90),
                r.range(1, 4)
            ),
            _ => format!(
                "Before changing `{func}` I want to confirm who calls it; a search for `{f}` should show every use."
            ),
        }
    }

    fn prose(&mut self) -> String {
        let n = self.rng.range(1, 5) as usize;
        let mut out: Vec<String> = (0..n).map(|_| self.sentence()).collect();
        if self.rng.chance(0.2) {
            out.push("\n\nPlan:".to_owned());
            for i in 1..=self.rng.range(2, 6) {
                out.push(format!("\n{i}. {}", self.sentence()));
            }
        }
        out.join(" ")
    }

    /// A build log: usually incremental (a few workspace crates), sometimes
    /// from scratch.
    fn cargo_build(&mut self, fail: bool) -> String {
        let mut out = String::new();
        let crates = if self.rng.chance(0.15) {
            self.rng.range(20, 60)
        } else {
            self.rng.range(1, 5)
        };
        for _ in 0..crates {
            let c = self.rng.pick(CRATES);
            let v = self.version();
            out.push_str(&format!("   Compiling {c} v{v}\n"));
        }
        for _ in 0..self.rng.below(3) {
            let (f, file) = (self.rng.pick(FIELDS), self.rng.pick(FILES));
            let (line, col) = (self.rng.range(10, 900), self.rng.range(5, 40));
            let code = self.code_line();
            out.push_str(&format!(
                "warning: unused variable: `{f}`\n  --> {file}:{line}:{col}\n   |\n{line:>4} | {code}\n   |         ^^^^^^ help: if this is intentional, prefix it with an underscore: `_{f}`\n   |\n   = note: `#[warn(unused_variables)]` on by default\n\n"
            ));
        }
        if fail {
            let (file, ty) = (self.rng.pick(FILES), self.rng.pick(TYPES));
            let (line, col) = (self.rng.range(10, 900), self.rng.range(5, 40));
            let code = self.code_line();
            out.push_str(&format!(
                "error[E0308]: mismatched types\n  --> {file}:{line}:{col}\n   |\n{line:>4} | {code}\n   |              ^^^^^^^^^^^ expected `{ty}`, found `Option<{ty}>`\n   |\n   = note: expected struct `{ty}`\n              found enum `Option<{ty}>`\nhelp: consider using `Option::expect` to unwrap the `Option<{ty}>` value, panicking if the value is an `Option::None`\n\nFor more information about this error, try `rustc --explain E0308`.\nerror: could not compile `shepherd-store` (lib) due to 1 previous error\n"
            ));
        } else {
            out.push_str(&format!(
                "    Finished `dev` profile [unoptimized + debuginfo] target(s) in {}.{:02}s\n",
                self.rng.range(1, 90),
                self.rng.below(100)
            ));
        }
        out
    }

    fn cargo_test(&mut self) -> String {
        let mut out = self.cargo_build(false);
        let krate = self.rng.pick(&CRATES[..4]).replace('-', "_");
        out.push_str(&format!(
            "     Running unittests src/lib.rs (target/debug/deps/{krate}-{})\n\n",
            self.rng.hex(16)
        ));
        let n = self.rng.range(5, 60);
        out.push_str(&format!("running {n} tests\n"));
        let mut failed = Vec::new();
        let mut ignored = 0;
        for _ in 0..n {
            let name = format!(
                "{}::tests::{}_{}",
                self.rng.pick(&[
                    "ops::runs",
                    "ops::tasks",
                    "ops::claims",
                    "log",
                    "hub",
                    "sqlite"
                ]),
                self.rng.pick(FUNCTIONS),
                self.rng.pick(TEST_SUFFIXES)
            );
            let verdict = match self.rng.below(30) {
                0 => {
                    failed.push(name.clone());
                    "FAILED"
                }
                1 => {
                    ignored += 1;
                    "ignored"
                }
                _ => "ok",
            };
            out.push_str(&format!("test {name} ... {verdict}\n"));
        }
        if !failed.is_empty() {
            out.push_str("\nfailures:\n\n");
            for name in &failed {
                let file = self.rng.pick(FILES);
                let (line, col) = (self.rng.range(10, 900), self.rng.range(5, 40));
                let (l, r) = (self.rng.below(50), self.rng.below(50));
                out.push_str(&format!(
                    "---- {name} stdout ----\n\nthread '{name}' panicked at {file}:{line}:{col}:\nassertion `left == right` failed\n  left: {l}\n right: {r}\nnote: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n\n"
                ));
            }
            out.push_str("\nfailures:\n");
            for name in &failed {
                out.push_str(&format!("    {name}\n"));
            }
        }
        let verdict = if failed.is_empty() { "ok" } else { "FAILED" };
        out.push_str(&format!(
            "\ntest result: {verdict}. {} passed; {} failed; {ignored} ignored; 0 measured; 0 filtered out; finished in {}.{:02}s\n",
            n as usize - failed.len() - ignored,
            failed.len(),
            self.rng.below(5),
            self.rng.below(100)
        ));
        out
    }

    fn ls(&mut self) -> String {
        let n = self.rng.range(4, 20);
        let mut out = format!("total {}\n", self.rng.range(8, 400));
        for i in 0..n {
            let name = match i {
                0 => ".",
                1 => "..",
                _ => self.rng.pick(NAMES),
            };
            let dir = i < 2 || !name.contains('.');
            let (perm, size) = if dir {
                ("drwxr-xr-x", 4096)
            } else {
                ("-rw-r--r--", self.rng.range(80, 90_000))
            };
            let links = if dir { self.rng.range(2, 9) } else { 1 };
            let date = self.date();
            out.push_str(&format!(
                "{perm} {links:>2} agent agent {size:>6} {date} {name}\n"
            ));
        }
        out
    }

    fn diff(&mut self) -> String {
        let mut out = String::new();
        for _ in 0..self.rng.range(1, 4) {
            let file = self.rng.pick(FILES);
            let (a, b) = (self.rng.hex(9), self.rng.hex(9));
            out.push_str(&format!(
                "diff --git a/{file} b/{file}\nindex {a}..{b} 100644\n--- a/{file}\n+++ b/{file}\n"
            ));
            for _ in 0..self.rng.range(1, 4) {
                let start = self.rng.range(1, 800);
                let (del, add) = (self.rng.range(0, 6), self.rng.range(1, 9));
                let func = self.rng.pick(FUNCTIONS);
                out.push_str(&format!(
                    "@@ -{start},{} +{start},{} @@ pub async fn {func}<D: Db>(\n",
                    del + 6,
                    add + 6
                ));
                for l in self.code_block(3) {
                    out.push_str(&format!(" {l}\n"));
                }
                for l in self.code_block(del as usize) {
                    out.push_str(&format!("-{l}\n"));
                }
                for l in self.code_block(add as usize) {
                    out.push_str(&format!("+{l}\n"));
                }
                for l in self.code_block(3) {
                    out.push_str(&format!(" {l}\n"));
                }
            }
        }
        out
    }

    fn numbered(&mut self, n: usize) -> String {
        let start = self.rng.range(1, 600) as usize;
        let mut out = String::new();
        for (i, l) in self.code_block(n).into_iter().enumerate() {
            out.push_str(&format!("{:>6}\t{l}\n", start + i));
        }
        out
    }

    fn grep(&mut self) -> String {
        let mut out = String::new();
        for _ in 0..self.rng.range(3, 30) {
            let (file, line) = (self.rng.pick(FILES), self.rng.range(1, 900));
            let code = self.code_line();
            out.push_str(&format!("{file}:{line}:{}\n", code.trim_start()));
        }
        out
    }

    fn git_log(&mut self) -> String {
        let mut out = String::new();
        for _ in 0..self.rng.range(3, 10) {
            let hash = self.rng.hex(40);
            let who = self
                .rng
                .pick(&["Ada Okafor", "Lin Chen", "Sam Rivera", "shepherd-bot"]);
            let email = who.to_lowercase().replace(' ', ".");
            let date = self.date();
            let msg = format!(
                "{}: {} {}",
                self.rng.pick(&["store", "api", "core", "runner", "web"]),
                self.rng.pick(&["fix", "make", "ensure", "test that"]),
                self.rng.pick(PHRASES)
            );
            out.push_str(&format!(
                "commit {hash}\nAuthor: {who} <{email}@example.com>\nDate:   Tue {date}:{:02} 2025 +0000\n\n    {msg}\n\n",
                self.rng.below(60)
            ));
        }
        out
    }

    /// A JSON document a tool returned: code search hits, CI check runs or
    /// Shepherd's own run list.
    fn json_output(&mut self) -> String {
        let value = match self.rng.below(3) {
            0 => {
                let hits: Vec<_> = (0..self.rng.range(3, 15))
                    .map(|_| {
                        json!({
                            "path": self.rng.pick(FILES),
                            "line": self.rng.range(1, 900),
                            "column": self.rng.range(1, 60),
                            "score": self.rng.below(1000) as f64 / 1000.0,
                            "symbol": self.rng.pick(FUNCTIONS),
                            "kind": self.rng.pick(&["function", "struct", "field", "const"]),
                            "preview": self.code_line().trim().to_owned(),
                        })
                    })
                    .collect();
                json!({
                    "query": self.rng.pick(FIELDS),
                    "total": hits.len(),
                    "took_ms": self.rng.range(2, 300),
                    "results": hits,
                })
            }
            1 => {
                let runs: Vec<_> = (0..self.rng.range(2, 8))
                    .map(|_| {
                        let id = self.rng.range(10_000_000_000, 20_000_000_000);
                        json!({
                            "id": id,
                            "name": format!("ci / {} ({})", self.rng.pick(&["test", "clippy", "fmt", "build"]), self.rng.pick(&["ubuntu-latest", "macos-14"])),
                            "head_sha": self.rng.hex(40),
                            "status": "completed",
                            "conclusion": self.rng.pick(&["success", "success", "failure", "skipped"]),
                            "started_at": format!("2025-0{}-{:02}T{:02}:{:02}:{:02}Z", self.rng.range(1, 10), self.rng.range(1, 29), self.rng.below(24), self.rng.below(60), self.rng.below(60)),
                            "html_url": format!("https://github.com/example/shepherd/actions/runs/{id}/job/{}", self.rng.range(30_000_000_000, 40_000_000_000)),
                            "output": { "title": self.sentence(), "annotations_count": self.rng.below(5) },
                        })
                    })
                    .collect();
                json!({ "total_count": runs.len(), "check_runs": runs })
            }
            _ => {
                let runs: Vec<_> = (0..self.rng.range(2, 10))
                    .map(|_| {
                        json!({
                            "id": self.rng.uuid(),
                            "vtid": format!("VT-{:06}", self.rng.below(TASKS as u64)),
                            "task": self.sentence(),
                            "worker_id": self.rng.uuid(),
                            "agent_id": self.rng.pick(&AGENTS),
                            "status": self.rng.pick(&STATUSES),
                            "started_at": 1_750_000_000_000u64 + self.rng.below(10_000_000_000),
                            "step_count": self.rng.below(40),
                            "tool_calls": self.rng.below(20),
                            "has_transcript": self.rng.chance(0.8),
                        })
                    })
                    .collect();
                json!({ "runs": runs, "total": self.rng.range(10, 5000), "cursor": self.rng.range(1000, 900_000) })
            }
        };
        serde_json::to_string_pretty(&value).unwrap_or_default()
    }

    /// One tool call and what it returned: (name, args JSON, result text).
    fn tool(&mut self) -> (String, String, String) {
        let krate = self.rng.pick(&CRATES[..4]);
        let (name, args, text) = match self.rng.below(100) {
            0..=19 => (
                "bash",
                json!({ "command": format!("cargo test -p {krate}"), "timeout_ms": 600_000 }),
                self.cargo_test(),
            ),
            20..=32 => {
                let fail = self.rng.chance(0.3);
                (
                    "bash",
                    json!({ "command": format!("cargo build -p {krate}") }),
                    self.cargo_build(fail),
                )
            }
            33..=47 => {
                let n = self.rng.range(20, 120) as usize;
                (
                    "read_file",
                    json!({ "path": self.rng.pick(FILES) }),
                    self.numbered(n),
                )
            }
            48..=57 => ("bash", json!({ "command": "git diff" }), self.diff()),
            58..=67 => {
                let path = self.rng.pick(FILES);
                let (n_old, n_new) = (self.rng.range(2, 8), self.rng.range(2, 10));
                let old = self.code_block(n_old as usize).join("\n");
                let new = self.code_block(n_new as usize).join("\n");
                let snippet = self.numbered(12);
                (
                    "edit_file",
                    json!({ "path": path, "old_str": old, "new_str": new }),
                    format!("The file {path} has been edited. Here's the result of running `cat -n` on a snippet:\n{snippet}Review the changes and make sure they are as expected."),
                )
            }
            68..=77 => {
                let pattern = self.rng.pick(FIELDS);
                (
                    "bash",
                    json!({ "command": format!("rg -n '{pattern}' crates/") }),
                    self.grep(),
                )
            }
            78..=87 => (
                "search",
                json!({ "query": self.sentence(), "max_results": 20 }),
                self.json_output(),
            ),
            88..=93 => (
                "bash",
                json!({ "command": format!("ls -la {}", self.rng.pick(&["crates/store", "crates/core/src", ".", "crates/api"])) }),
                self.ls(),
            ),
            _ => ("bash", json!({ "command": "git log -n 8" }), self.git_log()),
        };
        (name.to_owned(), args.to_string(), text)
    }

    fn transcript(&mut self) -> Vec<TranscriptStep> {
        let target = self.rng.range(28, 33) as usize;
        let mut steps = Vec::new();
        while steps.len() + 1 < target {
            let calls = if self.rng.chance(0.1) { 2 } else { 1 };
            let mut content = vec![ActionContent::Text { text: self.prose() }];
            let mut results = Vec::new();
            for _ in 0..calls {
                let id = format!("toolu_01{}", self.rng.base62(22));
                let (name, args, text) = self.tool();
                content.push(ActionContent::ToolCall {
                    id: id.clone(),
                    name: name.clone(),
                    args,
                });
                results.push(TranscriptStep::ToolResult {
                    call_id: id,
                    name,
                    text,
                });
            }
            steps.push(TranscriptStep::Action { content });
            steps.extend(results);
        }
        steps.push(TranscriptStep::Action {
            content: vec![ActionContent::Text {
                text: format!("Done. {}", self.prose()),
            }],
        });
        // As the store does when it accepts steps.
        steps.into_iter().map(TranscriptStep::truncated).collect()
    }
}

/// One stored transcript.
struct Transcript {
    raw_bytes: usize,
    blob: Vec<u8>,
    steps: i64,
    tool_calls: i64,
}

fn generate_corpus(n: usize) -> (Vec<Transcript>, Duration) {
    let mut compress_time = Duration::ZERO;
    let corpus = (0..n)
        .map(|i| {
            let steps = Gen {
                rng: Rng::new(SEED ^ (i as u64) << 8),
            }
            .transcript();
            let raw_bytes = serde_json::to_vec(&steps).map(|v| v.len()).unwrap_or(0);
            let t = Instant::now();
            let blob = transcript::compress(&steps);
            compress_time += t.elapsed();
            let tool_calls = steps
                .iter()
                .map(|s| match s {
                    TranscriptStep::Action { content } => content
                        .iter()
                        .filter(|c| matches!(c, ActionContent::ToolCall { .. }))
                        .count() as i64,
                    TranscriptStep::ToolResult { .. } => 0,
                })
                .sum();
            Transcript {
                raw_bytes,
                blob,
                steps: steps.len() as i64,
                tool_calls,
            }
        })
        .collect();
    (corpus, compress_time)
}

fn report_compression(corpus: &[Transcript], compress_time: Duration) {
    let raw: usize = corpus.iter().map(|t| t.raw_bytes).sum();
    let gz: usize = corpus.iter().map(|t| t.blob.len()).sum();
    let mut ratios: Vec<f64> = corpus
        .iter()
        .map(|t| t.raw_bytes as f64 / t.blob.len() as f64)
        .collect();
    ratios.sort_by(f64::total_cmp);
    let mut sizes: Vec<usize> = corpus.iter().map(|t| t.blob.len()).collect();
    sizes.sort_unstable();
    let mut raws: Vec<usize> = corpus.iter().map(|t| t.raw_bytes).collect();
    raws.sort_unstable();
    let steps: Vec<i64> = corpus.iter().map(|t| t.steps).collect();
    println!("== transcript compression (shepherd_core::transcript::compress, gzip level 6)");
    println!(
        "corpus: {} transcripts, {}..{} steps each",
        corpus.len(),
        steps.iter().min().unwrap_or(&0),
        steps.iter().max().unwrap_or(&0)
    );
    println!(
        "raw JSON: {raw} bytes total, per transcript min {} / median {} / max {}",
        raws[0],
        raws[raws.len() / 2],
        raws[raws.len() - 1]
    );
    println!(
        "gzipped:  {gz} bytes total, per transcript min {} / median {} / max {}",
        sizes[0],
        sizes[sizes.len() / 2],
        sizes[sizes.len() - 1]
    );
    println!(
        "ratio:    overall {:.2}x; per transcript min {:.2}x / median {:.2}x / max {:.2}x",
        raw as f64 / gz as f64,
        ratios[0],
        ratios[ratios.len() / 2],
        ratios[ratios.len() - 1]
    );
    println!(
        "compress: {:.1} MB/s of raw JSON ({:.2} ms per transcript)",
        raw as f64 / 1e6 / compress_time.as_secs_f64(),
        compress_time.as_secs_f64() * 1e3 / corpus.len() as f64
    );
    println!();
}

// ----- the populated data -----

struct Fixtures {
    channels: Vec<(String, String)>,
    /// (id, agent index, token hash)
    workers: Vec<(String, usize, String)>,
    /// (vtid, title, channel index)
    tasks: Vec<(String, String, Option<usize>)>,
    /// The start of run 0; runs follow every `RUN_SPACING_MS` on average.
    t0: i64,
}

impl Fixtures {
    fn new(large: u64) -> Fixtures {
        let mut rng = Rng::new(SEED ^ 0xF1);
        let now = chrono::Utc::now().timestamp_millis();
        let t0 = now - large as i64 * RUN_SPACING_MS;
        let channels = (0..CHANNELS)
            .map(|i| (format!("ch-{i}"), format!("#team-{}", rng.pick(NAMES))))
            .collect();
        let workers = (0..WORKERS)
            .map(|i| (rng.uuid(), i % AGENTS.len(), rng.hex(64)))
            .collect();
        let mut gen = Gen {
            rng: Rng::new(SEED ^ 0xF2),
        };
        let tasks = (0..TASKS)
            .map(|i| {
                let title = format!(
                    "{} `{}` so that it {}",
                    gen.rng
                        .pick(&["Fix", "Refactor", "Speed up", "Test", "Document"]),
                    gen.rng.pick(FUNCTIONS),
                    gen.rng.pick(PHRASES)
                );
                let ch = (i % (CHANNELS + 1) < CHANNELS).then_some(i % (CHANNELS + 1));
                (format!("VT-{i:06}"), title, ch)
            })
            .collect();
        Fixtures {
            channels,
            workers,
            tasks,
            t0,
        }
    }
}

/// One row of `runs`, borrowed from the fixtures.
struct RunRow<'a> {
    id: String,
    task_id: &'a str,
    task: &'a str,
    channel_id: Option<&'a str>,
    worker_id: &'a str,
    agent: usize,
    attempt: i64,
    purpose: &'static str,
    status: usize,
    result: Option<String>,
    started_at: i64,
    completed_at: Option<i64>,
    live_status: Option<String>,
    tool_calls: i64,
    active_tool: Option<&'static str>,
    step_count: i64,
    last_step_at: Option<i64>,
    cancel_requested_at: Option<i64>,
    /// Corpus index of the transcript (finished runs only).
    transcript: Option<usize>,
}

impl RunRow<'_> {
    /// The run's claim release. Every generated run is released, the running
    /// ones too: several may share a task, and the database allows one
    /// active claim per task. The list reads never look at it.
    fn released_at(&self) -> i64 {
        self.completed_at.unwrap_or(self.started_at)
    }
}

/// Run `i`: a pure function of `i`, so both databases get identical rows.
fn run_row<'a>(fx: &'a Fixtures, corpus: &[Transcript], i: u64) -> RunRow<'a> {
    let mut rng = Rng::new(SEED ^ 0xAB ^ i.wrapping_mul(0x1000_0001));
    let id = rng.uuid();
    let w = &fx.workers[rng.below(WORKERS as u64) as usize];
    let t = &fx.tasks[rng.below(TASKS as u64) as usize];
    let status = match rng.below(1000) {
        0..=719 => 1,
        720..=899 => 2,
        900..=979 => 3,
        _ => 0,
    };
    let started_at = fx.t0 + i as i64 * RUN_SPACING_MS + rng.below(RUN_SPACING_MS as u64) as i64;
    let duration = rng.range(30_000, 2_400_000) as i64;
    let attempt = if rng.chance(0.1) { 2 } else { 1 };
    let purpose = if rng.chance(0.15) {
        "validate"
    } else {
        "build"
    };
    let (transcript, step_count, tool_calls) = if status == 0 {
        let n = rng.below(30) as i64;
        (None, n, n / 2)
    } else {
        let k = (i % corpus.len() as u64) as usize;
        (Some(k), corpus[k].steps, corpus[k].tool_calls)
    };
    let completed_at = (status != 0).then_some(started_at + duration);
    let result = match status {
        1 if rng.chance(0.5) => Some(format!(
            "opened PR #{} with {} changed files",
            rng.range(100, 9000),
            rng.range(1, 20)
        )),
        2 => Some(format!(
            "cargo test failed: {} tests failed in {}",
            rng.range(1, 6),
            rng.pick(&CRATES[..4])
        )),
        3 => Some("cancelled by operator".to_owned()),
        _ => None,
    };
    RunRow {
        id,
        task_id: &t.0,
        task: &t.1,
        channel_id: t.2.map(|c| fx.channels[c].0.as_str()),
        worker_id: &w.0,
        agent: w.1,
        attempt,
        purpose,
        status,
        result,
        started_at,
        completed_at,
        live_status: (status == 0)
            .then(|| format!("running cargo test ({} of 30 steps)", step_count)),
        tool_calls,
        active_tool: (status == 0).then_some("bash"),
        step_count,
        last_step_at: Some(completed_at.unwrap_or(started_at + duration / 2)),
        cancel_requested_at: (status == 3).then(|| started_at + duration - 5_000),
        transcript,
    }
}

/// Runs per agent and status, to check the totals the store returns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Counts([[i64; 4]; 4]);

impl Counts {
    fn add(&mut self, r: &RunRow) {
        self.0[r.agent][r.status] += 1;
    }
    fn merge(&mut self, o: &Counts) {
        for a in 0..4 {
            for s in 0..4 {
                self.0[a][s] += o.0[a][s];
            }
        }
    }
    fn total(&self, agent: usize, status: Option<&str>) -> i64 {
        match status {
            None => self.0[agent].iter().sum(),
            Some(s) => self.0[agent][STATUSES.iter().position(|x| *x == s).unwrap_or(0)],
        }
    }
}

const RUN_COLUMNS_INSERT: &str =
    "id, task_id, task, channel_id, worker_id, agent_id, worker_type, \
    attempt, purpose, status, result, started_at, completed_at, live_status, tool_calls, \
    active_tool, step_count, last_step_at, cancel_requested_at, has_transcript, released_at";

/// Rebuilds the per-agent, per-status counters of finished runs from the
/// rows, as the store keeps them (the list's total reads them; running runs
/// are counted from the index). One counter row per agent and status here,
/// where the store keeps one per worker: the sum is the same.
const REBUILD_RUN_COUNTS: &str = "DELETE FROM run_counts; \
    INSERT INTO run_counts (agent_id, status, worker_id, n) \
    SELECT agent_id, status, '', COUNT(*) FROM runs WHERE status <> 'running' GROUP BY agent_id, status;";

// ----- the statements `list_runs` makes (mirrors crates/store/src/ops/runs.rs) -----

const LIST_COLUMNS: &str = "r.id, r.task_id, r.task, r.channel_id, ch.name, r.worker_id, r.agent_id, r.worker_type, \
    r.attempt, r.purpose, r.status, r.result, r.started_at, r.completed_at, r.live_status, r.tool_calls, \
    r.active_tool, r.step_count, r.has_transcript, r.cancel_requested_at";

/// (total SQL, page SQL) with `$N` placeholders: agent, [status], limit,
/// offset. The total is summed from `run_counts` (no `q` / `vtid` filter
/// here); the page is a deferred join: the ids from the index, then their rows.
fn list_sql(with_status: bool) -> (String, String) {
    let mut cond = String::from(" WHERE 1 = 1 AND r.agent_id = $1");
    if with_status {
        cond.push_str(" AND r.status = $2");
    }
    let counted_cond = cond
        .replace("r.agent_id", "agent_id")
        .replace("r.status", "status");
    let n = if with_status { 3 } else { 2 };
    (
        format!(
            "SELECT (SELECT CAST(COALESCE(SUM(n), 0) AS BIGINT) FROM run_counts{counted_cond}) \
             + (SELECT COUNT(*) FROM runs r{cond} AND r.status = 'running')"
        ),
        format!(
            "SELECT {LIST_COLUMNS} FROM runs r LEFT JOIN channels ch ON ch.id = r.channel_id \
             JOIN (SELECT r.id FROM runs r{cond} \
             ORDER BY r.started_at DESC, r.id DESC LIMIT ${n} OFFSET ${}) page ON page.id = r.id \
             ORDER BY r.started_at DESC, r.id DESC",
            n + 1
        ),
    )
}

// ----- statistics -----

struct Stats {
    p50: f64,
    p99: f64,
    max: f64,
    mean: f64,
}

fn stats(samples: &[Duration]) -> Stats {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    let rank = |p: f64| {
        let i = ((p * ms.len() as f64).ceil() as usize).clamp(1, ms.len());
        ms[i - 1]
    };
    Stats {
        p50: rank(0.50),
        p99: rank(0.99),
        max: ms[ms.len() - 1],
        mean: ms.iter().sum::<f64>() / ms.len() as f64,
    }
}

fn fmt_count(n: u64) -> String {
    if n >= 1_000_000 && n / 1_000_000 * 1_000_000 == n {
        format!("{}M", n / 1_000_000)
    } else if n >= 1000 && n / 1000 * 1000 == n {
        format!("{}k", n / 1000)
    } else {
        n.to_string()
    }
}

// ----- timing list_runs on a pair of stores -----

struct Pair<'a> {
    blob: &'a Store,
    plain: &'a Store,
}

async fn timed_list(
    store: &Store,
    v: &Variant,
    agent: usize,
    counts: &Counts,
    blobs: bool,
) -> BenchResult<Duration> {
    let filter = RunFilter {
        agent_id: Some(AGENTS[agent].to_owned()),
        status: v.status.map(str::to_owned),
        limit: PAGE,
        offset: v.offset,
        ..Default::default()
    };
    let t = Instant::now();
    let shepherd_store::Page {
        items: runs, total, ..
    } = store.list_runs(filter).await?;
    let elapsed = t.elapsed();
    let expected = counts.total(agent, v.status);
    if total != expected {
        return Err(format!("{}: total {total}, expected {expected}", v.name).into());
    }
    let want = (expected - v.offset).clamp(0, PAGE) as usize;
    if runs.len() != want {
        return Err(format!("{}: {} rows, expected {want}", v.name, runs.len()).into());
    }
    if let Some(r) = runs.iter().find(|r| r.agent_id != AGENTS[agent]) {
        return Err(format!("{}: run {} of another agent", v.name, r.id).into());
    }
    let finished_with_blob = runs.iter().filter(|r| r.has_transcript).count();
    let finished = runs.iter().filter(|r| r.status != "running").count();
    let ok = if blobs {
        finished_with_blob == finished
    } else {
        finished_with_blob == 0
    };
    if !ok {
        return Err(format!("{}: has_transcript flags wrong (blobs: {blobs})", v.name).into());
    }
    Ok(elapsed)
}

/// How many timed calls fit the budget, given the warm-up's mean.
fn calls_for(mean: Duration, budget: Duration, max: usize, min: usize) -> usize {
    let fit = budget.as_secs_f64() / mean.as_secs_f64().max(1e-6);
    (fit as usize).clamp(min, max)
}

/// Times every variant on both stores; prints one line per (variant, table).
/// Returns the worst p99 seen.
async fn measure(backend: &str, rows: u64, pair: &Pair<'_>, counts: &Counts) -> BenchResult<f64> {
    let mut worst: f64 = 0.0;
    println!(
        "  {:<8} {:>5}  {:<19} {:<6} {:>5} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "backend",
        "runs",
        "query",
        "table",
        "calls",
        "p50 ms",
        "p99 ms",
        "max ms",
        "mean ms",
        "total"
    );
    for v in &VARIANTS {
        let stores = [(pair.blob, true), (pair.plain, false)];
        let mut planned = [0; 2];
        for (which, (store, blobs)) in stores.into_iter().enumerate() {
            let t = Instant::now();
            let mut n = 0;
            while n < WARMUP && (n < 2 || t.elapsed() < WARMUP_BUDGET) {
                timed_list(store, v, n % AGENTS.len(), counts, blobs).await?;
                n += 1;
            }
            planned[which] = calls_for(t.elapsed() / n as u32, BUDGET, CALLS, MIN_CALLS);
        }
        let mut samples: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
        let mut round = 0;
        while samples[0].len() < planned[0] || samples[1].len() < planned[1] {
            let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
            for which in order {
                let (store, blobs) = stores[which];
                for _ in 0..ROUND.min(planned[which] - samples[which].len()) {
                    let agent = samples[which].len() % AGENTS.len();
                    samples[which].push(timed_list(store, v, agent, counts, blobs).await?);
                }
            }
            round += 1;
        }
        let mut p50s = [0.0; 2];
        for (which, table) in ["blobs", "plain"].iter().enumerate() {
            let s = stats(&samples[which]);
            worst = worst.max(s.p99);
            p50s[which] = s.p50;
            println!(
                "  {:<8} {:>5}  {:<19} {:<6} {:>5} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>7}",
                backend,
                fmt_count(rows),
                v.name,
                table,
                samples[which].len(),
                s.p50,
                s.p99,
                s.max,
                s.mean,
                counts.total(0, v.status)
            );
        }
        println!(
            "  {:<8} {:>5}  {:<19} blobs/plain p50 = {:.2}",
            "",
            "",
            "",
            p50s[0] / p50s[1]
        );
    }
    println!(
        "  worst p99 at {} runs: {worst:.3} ms -> goal p99 < {GOAL_P99_MS} ms {}",
        fmt_count(rows),
        if worst < GOAL_P99_MS { "MET" } else { "MISSED" }
    );
    Ok(worst)
}

fn print_breakdown_line(table: &str, v: &Variant, count: &[Duration], page: &[Duration]) {
    let (c, p) = (stats(count), stats(page));
    println!(
        "    {:<6} {:<19} total p50 {:>9.3} p99 {:>9.3} | page p50 {:>9.3} p99 {:>9.3}  ({} calls)",
        table,
        v.name,
        c.p50,
        c.p99,
        p.p50,
        p.p99,
        count.len()
    );
}

/// True while the breakdown of one statement pair should go on.
fn breakdown_more(done: usize, started: Instant) -> bool {
    done < BREAKDOWN_CALLS && (done < 2 || started.elapsed() < BREAKDOWN_BUDGET)
}

fn print_plan(title: &str, blob: &[String], plain: &[String]) {
    println!("    -- {title} (blobs table)");
    for l in blob {
        println!("       {l}");
    }
    if blob != plain {
        println!("    -- {title} (plain table, differs)");
        for l in plain {
            println!("       {l}");
        }
    }
}

// ----- common plumbing -----

struct Config {
    small: u64,
    large: u64,
    sections: Vec<String>,
    keep: bool,
    pg_url: String,
}

impl Config {
    fn from_env() -> Config {
        let scale: f64 = std::env::var("SHEPHERD_BENCH_SCALE")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(1.0);
        let sections = std::env::args()
            .skip(1)
            .filter(|a| !a.starts_with('-'))
            .collect();
        Config {
            small: ((SMALL_RUNS * scale).round() as u64).max(100),
            large: ((LARGE_RUNS * scale).round() as u64).max(1000),
            sections,
            keep: std::env::var("SHEPHERD_BENCH_KEEP").is_ok_and(|v| v == "1"),
            pg_url: std::env::var("SHEPHERD_BENCH_PG_URL")
                .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned()),
        }
    }
    fn wants(&self, section: &str) -> bool {
        self.sections.is_empty() || self.sections.iter().any(|s| s == section)
    }
}

fn unique() -> String {
    format!("{}_{}", chrono::Utc::now().timestamp(), std::process::id())
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

// ----- SQLite -----

fn sqlite_setup(conn: &rusqlite::Connection, fx: &Fixtures) -> BenchResult<()> {
    let now = fx.t0;
    for a in AGENTS {
        conn.execute(
            "INSERT INTO agents (id, worker_type, capabilities, source, created_at, updated_at) \
             VALUES (?1, 'builtin', '[\"rust\"]', 'config', ?2, ?2)",
            rusqlite::params![a, now],
        )?;
    }
    for (id, name) in &fx.channels {
        conn.execute(
            "INSERT INTO channels (id, name, created_at) VALUES (?1, ?2, ?3)",
            rusqlite::params![id, name, now],
        )?;
    }
    for (i, (id, agent, token)) in fx.workers.iter().enumerate() {
        conn.execute(
            "INSERT INTO workers (id, agent_id, worker_type, name, status, token_hash, registered_at, last_heartbeat_at) \
             VALUES (?1, ?2, 'builtin', ?3, 'active', ?4, ?5, ?5)",
            rusqlite::params![id, AGENTS[*agent], format!("worker-{i}"), token, now],
        )?;
    }
    for (i, (id, title, ch)) in fx.tasks.iter().enumerate() {
        conn.execute(
            "INSERT INTO tasks (id, title, spec, agent_id, channel_id, workflow, state, attempts, created_at, updated_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, 'simple', 'done', 1, ?6, ?6)",
            rusqlite::params![
                id,
                title,
                format!("## Goal\n\n{title}.\n"),
                AGENTS[i % AGENTS.len()],
                ch.map(|c| fx.channels[c].0.as_str()),
                now
            ],
        )?;
    }
    Ok(())
}

/// Bulk-loads runs `range` into the SQLite file (with blobs: each finished
/// run's transcript in `run_transcripts`, right after its run row, and
/// `has_transcript = 1`; without: `has_transcript = 0` and no transcript
/// rows), then rebuilds `run_counts`, all with the journal off; restores
/// WAL and syncs the file before returning.
fn sqlite_load(
    path: &Path,
    fx: &Fixtures,
    corpus: &[Transcript],
    range: Range<u64>,
    blobs: bool,
) -> BenchResult<Counts> {
    let conn = rusqlite::Connection::open(path)?;
    conn.busy_timeout(Duration::from_secs(10))?;
    // The store's connections may take a moment to close after `close()`.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mode: Result<String, _> = conn.query_row("PRAGMA journal_mode = OFF", [], |r| r.get(0));
        match mode {
            Ok(m) if m.eq_ignore_ascii_case("off") => break,
            _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            other => {
                return Err(format!("cannot take the SQLite file for loading: {other:?}").into())
            }
        }
    }
    conn.pragma_update(None, "synchronous", "OFF")?;
    conn.pragma_update(None, "cache_size", -262_144)?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    conn.execute_batch("BEGIN")?;
    if range.start == 0 {
        sqlite_setup(&conn, fx)?;
    }
    let mut counts = Counts::default();
    {
        let mut stmt = conn.prepare(&format!(
            "INSERT INTO runs ({RUN_COLUMNS_INSERT}) VALUES \
             (?1, ?2, ?3, ?4, ?5, ?6, 'builtin', ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)"
        ))?;
        let mut blob_stmt =
            conn.prepare("INSERT INTO run_transcripts (run_id, blob) VALUES (?1, ?2)")?;
        for i in range {
            let r = run_row(fx, corpus, i);
            counts.add(&r);
            let blob = if blobs {
                r.transcript.map(|k| corpus[k].blob.as_slice())
            } else {
                None
            };
            stmt.execute(rusqlite::params![
                r.id,
                r.task_id,
                r.task,
                r.channel_id,
                r.worker_id,
                AGENTS[r.agent],
                r.attempt,
                r.purpose,
                STATUSES[r.status],
                r.result,
                r.started_at,
                r.completed_at,
                r.live_status,
                r.tool_calls,
                r.active_tool,
                r.step_count,
                r.last_step_at,
                r.cancel_requested_at,
                i64::from(blob.is_some()),
                r.released_at(),
            ])?;
            if let Some(b) = blob {
                blob_stmt.execute(rusqlite::params![r.id, b])?;
            }
        }
    }
    conn.execute_batch(REBUILD_RUN_COUNTS)?;
    conn.execute_batch("COMMIT")?;
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(format!("could not restore WAL mode: {mode}").into());
    }
    drop(conn);
    std::fs::File::open(path)?.sync_all()?;
    Ok(counts)
}

/// Loads both files in parallel (one thread each).
fn sqlite_load_pair(
    paths: &[PathBuf; 2],
    fx: &Fixtures,
    corpus: &[Transcript],
    range: Range<u64>,
) -> BenchResult<Counts> {
    let (a, b) = std::thread::scope(|s| {
        let blob = s.spawn(|| sqlite_load(&paths[0], fx, corpus, range.clone(), true));
        let plain = s.spawn(|| sqlite_load(&paths[1], fx, corpus, range.clone(), false));
        (blob.join(), plain.join())
    });
    let a = a.map_err(|_| "loader thread panicked")??;
    let b = b.map_err(|_| "loader thread panicked")??;
    if a != b {
        return Err("the two SQLite loads disagree".into());
    }
    Ok(a)
}

async fn open_sqlite(path: &Path) -> BenchResult<Store> {
    Ok(Store::open(&StoreConfig::new(format!("sqlite://{}", path.display()))).await?)
}

/// Closes a store and gives its background task a moment to let go of it.
async fn close(store: Store) {
    store.close();
    drop(store);
    tokio::time::sleep(Duration::from_millis(300)).await;
}

fn sqlite_plan(
    conn: &rusqlite::Connection,
    sql: &str,
    v: &Variant,
    page: bool,
) -> BenchResult<Vec<String>> {
    let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {}", sql.replace('$', "?")))?;
    let args = sqlite_value_args(v, 0, page);
    let rows = stmt.query_map(rusqlite::params_from_iter(args), |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, String>(3)?,
        ))
    })?;
    let mut depth: HashMap<i64, usize> = HashMap::new();
    let mut out = Vec::new();
    for row in rows {
        let (id, parent, detail) = row?;
        let d = depth.get(&parent).map_or(0, |d| d + 1);
        depth.insert(id, d);
        out.push(format!("{}{detail}", "  ".repeat(d)));
    }
    Ok(out)
}

fn sqlite_value_args(v: &Variant, agent: usize, page: bool) -> Vec<rusqlite::types::Value> {
    use rusqlite::types::Value as V;
    let mut args = vec![V::Text(AGENTS[agent].to_owned())];
    if let Some(s) = v.status {
        args.push(V::Text(s.to_owned()));
    }
    if page {
        args.push(V::Integer(PAGE));
        args.push(V::Integer(v.offset));
    }
    args
}

/// Times the two statements separately on a read-only connection like the
/// store's readers, and prints their plans.
fn sqlite_breakdown(paths: &[PathBuf; 2]) -> BenchResult<()> {
    let open = |p: &Path| -> BenchResult<rusqlite::Connection> {
        let c = rusqlite::Connection::open_with_flags(
            p,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        c.busy_timeout(Duration::from_secs(5))?;
        Ok(c)
    };
    let conns = [open(&paths[0])?, open(&paths[1])?];
    println!("  breakdown (raw rusqlite, same SQL, up to {BREAKDOWN_CALLS} calls each, ms):");
    for v in &VARIANTS {
        let (count_sql, page_sql) = list_sql(v.status.is_some());
        let (count_sql, page_sql) = (count_sql.replace('$', "?"), page_sql.replace('$', "?"));
        for (conn, table) in conns.iter().zip(["blobs", "plain"]) {
            let mut counts = Vec::new();
            let mut pages = Vec::new();
            let started = Instant::now();
            while breakdown_more(counts.len(), started) {
                let agent = counts.len() % AGENTS.len();
                let t = Instant::now();
                let _n: i64 = conn.prepare_cached(&count_sql)?.query_row(
                    rusqlite::params_from_iter(sqlite_value_args(v, agent, false)),
                    |r| r.get(0),
                )?;
                counts.push(t.elapsed());
                let t = Instant::now();
                let mut stmt = conn.prepare_cached(&page_sql)?;
                let mut rows = stmt.query(rusqlite::params_from_iter(sqlite_value_args(
                    v, agent, true,
                )))?;
                while let Some(row) = rows.next()? {
                    for col in 0..20 {
                        let _ = row.get_ref(col)?;
                    }
                }
                pages.push(t.elapsed());
            }
            print_breakdown_line(table, v, &counts, &pages);
        }
    }
    println!("  query plans (EXPLAIN QUERY PLAN; no ANALYZE, as the store never runs it):");
    for v in &VARIANTS {
        let (count_sql, page_sql) = list_sql(v.status.is_some());
        if v.offset == 0 {
            print_plan(
                &format!("total, {}", v.name),
                &sqlite_plan(&conns[0], &count_sql, v, false)?,
                &sqlite_plan(&conns[1], &count_sql, v, false)?,
            );
        }
        print_plan(
            &format!("page, {}", v.name),
            &sqlite_plan(&conns[0], &page_sql, v, true)?,
            &sqlite_plan(&conns[1], &page_sql, v, true)?,
        );
    }
    Ok(())
}

fn file_mb(path: &Path) -> f64 {
    std::fs::metadata(path)
        .map(|m| m.len() as f64 / 1e6)
        .unwrap_or(0.0)
}

async fn sqlite_suite(cfg: &Config, fx: &Fixtures, corpus: &[Transcript]) -> BenchResult<()> {
    println!("== SQLite");
    let dir = PathBuf::from(format!("/tmp/shepherd-bench-runs-{}", unique()));
    std::fs::create_dir_all(&dir)?;
    let result = sqlite_phases(cfg, fx, corpus, &dir).await;
    if cfg.keep {
        println!("  kept: {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    println!();
    result
}

async fn sqlite_phases(
    cfg: &Config,
    fx: &Fixtures,
    corpus: &[Transcript],
    dir: &Path,
) -> BenchResult<()> {
    let paths = [dir.join("blobs.db"), dir.join("plain.db")];
    // Migrations create the schema.
    for p in &paths {
        close(open_sqlite(p).await?).await;
    }
    let mut counts = Counts::default();
    let mut loaded = 0;
    for target in [cfg.small, cfg.large] {
        let range = loaded..target;
        let n = range.end - range.start;
        let t = Instant::now();
        let (paths2, range2) = (paths.clone(), range.clone());
        let c = tokio::task::block_in_place(|| sqlite_load_pair(&paths2, fx, corpus, range2))?;
        counts.merge(&c);
        loaded = target;
        println!(
            "  populated {} -> {} runs ({} new, both files in parallel, incl. fsync): {}; files: blobs {:.0} MB, plain {:.0} MB",
            fmt_count(range.start),
            fmt_count(target),
            n,
            secs(t.elapsed()),
            file_mb(&paths[0]),
            file_mb(&paths[1])
        );
        let blob = open_sqlite(&paths[0]).await?;
        let plain = open_sqlite(&paths[1]).await?;
        let t = Instant::now();
        measure(
            "sqlite",
            target,
            &Pair {
                blob: &blob,
                plain: &plain,
            },
            &counts,
        )
        .await?;
        println!("  (timed in {})", secs(t.elapsed()));
        tokio::task::block_in_place(|| sqlite_breakdown(&paths))?;
        close(blob).await;
        close(plain).await;
    }
    Ok(())
}

// ----- PostgreSQL -----

async fn pg_connect(url: &str, schema: Option<&str>) -> BenchResult<Client> {
    let (client, conn) =
        tokio::time::timeout(Duration::from_secs(5), tokio_postgres::connect(url, NoTls))
            .await
            .map_err(|_| "timed out connecting")??;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    if let Some(s) = schema {
        client
            .batch_execute(&format!("SET search_path TO {s}"))
            .await?;
    }
    Ok(client)
}

async fn pg_setup(client: &mut Client, fx: &Fixtures) -> BenchResult<()> {
    let now = fx.t0;
    let tx = client.transaction().await?;
    for a in AGENTS {
        tx.execute(
            "INSERT INTO agents (id, worker_type, capabilities, source, created_at, updated_at) \
             VALUES ($1, 'builtin', '[\"rust\"]', 'config', $2, $2)",
            &[&a, &now],
        )
        .await?;
    }
    for (id, name) in &fx.channels {
        tx.execute(
            "INSERT INTO channels (id, name, created_at) VALUES ($1, $2, $3)",
            &[id, name, &now],
        )
        .await?;
    }
    for (i, (id, agent, token)) in fx.workers.iter().enumerate() {
        tx.execute(
            "INSERT INTO workers (id, agent_id, worker_type, name, status, token_hash, registered_at, last_heartbeat_at) \
             VALUES ($1, $2, 'builtin', $3, 'active', $4, $5, $5)",
            &[id, &AGENTS[*agent], &format!("worker-{i}"), token, &now],
        )
        .await?;
    }
    for (i, (id, title, ch)) in fx.tasks.iter().enumerate() {
        tx.execute(
            "INSERT INTO tasks (id, title, spec, agent_id, channel_id, workflow, state, attempts, created_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, 'simple', 'done', 1, $6, $6)",
            &[
                id,
                title,
                &format!("## Goal\n\n{title}.\n"),
                &AGENTS[i % AGENTS.len()],
                &ch.map(|c| fx.channels[c].0.as_str()),
                &now,
            ],
        )
        .await?;
    }
    // The tables belong to a throwaway schema: keep autovacuum from starting
    // in the middle of the timings (an explicit VACUUM ANALYZE of `runs`
    // follows each load; lists never read `run_transcripts`).
    tx.batch_execute(
        "ALTER TABLE runs SET (autovacuum_enabled = off, toast.autovacuum_enabled = off); \
         ALTER TABLE run_transcripts SET (autovacuum_enabled = off, toast.autovacuum_enabled = off)",
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Binary COPY of runs `range` into `runs` (with blobs: `has_transcript = 1`
/// on finished runs, then a second COPY of their transcripts into
/// `run_transcripts`; without: `has_transcript = 0` and no transcript rows),
/// then `run_counts` rebuilt from the rows.
///
/// The blob column already has `STORAGE EXTERNAL` (the migration sets it:
/// the blobs are gzipped). One shortcut keeps a million rows loadable in a
/// couple of minutes without changing what is stored: foreign-key triggers
/// are skipped for this session (`session_replication_role = replica`,
/// superuser only; otherwise they run): the same rows go through SQLite
/// with foreign keys enforced.
async fn pg_load(
    client: &mut Client,
    fx: &Fixtures,
    corpus: &[Transcript],
    range: Range<u64>,
    blobs: bool,
) -> BenchResult<Counts> {
    if range.start == 0 {
        pg_setup(client, fx).await?;
    }
    let skip_fk = client
        .batch_execute("SET session_replication_role = replica")
        .await
        .is_ok();
    let types = [
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::INT8,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::INT8,
        Type::INT8,
        Type::TEXT,
        Type::INT8,
        Type::TEXT,
        Type::INT8,
        Type::INT8,
        Type::INT8,
        Type::INT8,
        Type::INT8,
    ];
    let sink = client
        .copy_in(&format!(
            "COPY runs ({RUN_COLUMNS_INSERT}) FROM STDIN (FORMAT binary)"
        ))
        .await?;
    let mut writer = pin!(BinaryCopyInWriter::new(sink, &types));
    let mut counts = Counts::default();
    // (run id, corpus index) of the transcripts to copy after the runs.
    let mut transcripts: Vec<(String, usize)> = Vec::new();
    for i in range {
        let r = run_row(fx, corpus, i);
        counts.add(&r);
        let has_transcript = match r.transcript {
            Some(k) if blobs => {
                transcripts.push((r.id.clone(), k));
                1i64
            }
            _ => 0,
        };
        let released_at = r.released_at();
        let values: [&(dyn ToSql + Sync); 21] = [
            &r.id,
            &r.task_id,
            &r.task,
            &r.channel_id,
            &r.worker_id,
            &AGENTS[r.agent],
            &"builtin",
            &r.attempt,
            &r.purpose,
            &STATUSES[r.status],
            &r.result,
            &r.started_at,
            &r.completed_at,
            &r.live_status,
            &r.tool_calls,
            &r.active_tool,
            &r.step_count,
            &r.last_step_at,
            &r.cancel_requested_at,
            &has_transcript,
            &released_at,
        ];
        writer.as_mut().write(&values).await?;
    }
    writer.finish().await?;
    if !transcripts.is_empty() {
        let sink = client
            .copy_in("COPY run_transcripts (run_id, blob) FROM STDIN (FORMAT binary)")
            .await?;
        let mut writer = pin!(BinaryCopyInWriter::new(sink, &[Type::TEXT, Type::BYTEA]));
        for (id, k) in &transcripts {
            let blob: &[u8] = &corpus[*k].blob;
            writer.as_mut().write(&[id, &blob]).await?;
        }
        writer.finish().await?;
    }
    client
        .batch_execute(&format!("BEGIN; {REBUILD_RUN_COUNTS} COMMIT"))
        .await?;
    if skip_fk {
        client
            .batch_execute("SET session_replication_role = DEFAULT")
            .await?;
    }
    Ok(counts)
}

/// VACUUM ANALYZE of `runs` and `run_counts`, once no load is in flight
/// (an open COPY elsewhere would keep VACUUM from marking pages
/// all-visible). `run_transcripts` (the blobs) is left alone: list queries
/// never read it.
async fn pg_vacuum(client: &Client) -> BenchResult<Duration> {
    let t = Instant::now();
    client
        .batch_execute("VACUUM (ANALYZE, PROCESS_TOAST FALSE) runs, run_counts")
        .await?;
    Ok(t.elapsed())
}

async fn pg_plan(client: &Client, sql: &str, v: &Variant, page: bool) -> BenchResult<Vec<String>> {
    let agent = AGENTS[0];
    let mut args: Vec<&(dyn ToSql + Sync)> = vec![&agent];
    if let Some(s) = &v.status {
        args.push(s);
    }
    if page {
        args.push(&PAGE);
        args.push(&v.offset);
    }
    let rows = client
        .query(&format!("EXPLAIN (ANALYZE, BUFFERS) {sql}"), &args)
        .await?;
    rows.iter()
        .map(|r| r.try_get::<_, String>(0).map_err(Into::into))
        .collect()
}

async fn pg_breakdown(clients: &[Client; 2]) -> BenchResult<()> {
    println!(
        "  breakdown (raw tokio-postgres, same SQL, prepared, up to {BREAKDOWN_CALLS} calls each, ms):"
    );
    for v in &VARIANTS {
        let (count_sql, page_sql) = list_sql(v.status.is_some());
        for (client, table) in clients.iter().zip(["blobs", "plain"]) {
            let count_stmt = client.prepare(&count_sql).await?;
            let page_stmt = client.prepare(&page_sql).await?;
            let mut counts = Vec::new();
            let mut pages = Vec::new();
            let started = Instant::now();
            while breakdown_more(counts.len(), started) {
                let agent = AGENTS[counts.len() % AGENTS.len()];
                let mut args: Vec<&(dyn ToSql + Sync)> = vec![&agent];
                if let Some(s) = &v.status {
                    args.push(s);
                }
                let t = Instant::now();
                client.query_one(&count_stmt, &args).await?;
                counts.push(t.elapsed());
                args.push(&PAGE);
                args.push(&v.offset);
                let t = Instant::now();
                client.query(&page_stmt, &args).await?;
                pages.push(t.elapsed());
            }
            print_breakdown_line(table, v, &counts, &pages);
        }
    }
    println!(
        "  query plans (EXPLAIN (ANALYZE, BUFFERS), agent '{}'):",
        AGENTS[0]
    );
    for v in &VARIANTS {
        let (count_sql, page_sql) = list_sql(v.status.is_some());
        if v.offset == 0 {
            let a = pg_plan(&clients[0], &count_sql, v, false).await?;
            let b = pg_plan(&clients[1], &count_sql, v, false).await?;
            print_pg_plan(&format!("total, {}", v.name), &a, &b);
        }
        let a = pg_plan(&clients[0], &page_sql, v, true).await?;
        let b = pg_plan(&clients[1], &page_sql, v, true).await?;
        print_pg_plan(&format!("page, {}", v.name), &a, &b);
    }
    Ok(())
}

/// A plan's node lines without costs, timings and counters.
fn plan_shape(plan: &[String]) -> Vec<String> {
    const COUNTERS: [&str; 10] = [
        "Buffers",
        "Heap ",
        "Rows Removed",
        "Hits",
        "Planning",
        "Execution",
        "Full-sort",
        "Pre-sorted",
        "Sort Method",
        "Worker",
    ];
    plan.iter()
        .filter(|l| !COUNTERS.iter().any(|c| l.trim_start().starts_with(c)))
        .map(|l| l.split("  (cost=").next().unwrap_or_default().to_owned())
        .collect()
}

/// Prints the blobs table's plan, and the plain table's when its shape differs.
fn print_pg_plan(title: &str, blob: &[String], plain: &[String]) {
    println!("    -- {title} (blobs table)");
    for l in blob {
        println!("       {l}");
    }
    if plan_shape(blob) == plan_shape(plain) {
        let time = plain
            .iter()
            .find(|l| l.starts_with("Execution Time"))
            .cloned()
            .unwrap_or_default();
        println!("    -- plain table: same plan shape, {time}");
    } else {
        println!("    -- {title} (plain table, different plan)");
        for l in plain {
            println!("       {l}");
        }
    }
}

async fn pg_sizes(client: &Client) -> BenchResult<String> {
    let row = client
        .query_one(
            "SELECT pg_relation_size('runs'), \
                    pg_total_relation_size('runs') - pg_relation_size('runs') - pg_indexes_size('runs'), \
                    pg_indexes_size('runs'), \
                    pg_total_relation_size('run_transcripts')",
            &[],
        )
        .await?;
    let mb = |i: usize| row.get::<_, i64>(i) as f64 / 1e6;
    Ok(format!(
        "runs heap {:.0} MB, toast {:.0} MB, indexes {:.0} MB; run_transcripts (all) {:.0} MB",
        mb(0),
        mb(1),
        mb(2),
        mb(3)
    ))
}

async fn pg_suite(cfg: &Config, fx: &Fixtures, corpus: &[Transcript]) -> BenchResult<()> {
    println!("== PostgreSQL");
    let admin = match pg_connect(&cfg.pg_url, None).await {
        Ok(c) => c,
        Err(e) => {
            println!("  skipped: cannot connect to {} ({e})", cfg.pg_url);
            println!();
            return Ok(());
        }
    };
    let version: String = admin.query_one("SHOW server_version", &[]).await?.get(0);
    println!("  server {version}");
    let u = unique();
    let schemas = [format!("bench_{u}_blob"), format!("bench_{u}_plain")];
    let result = pg_phases(cfg, fx, corpus, &schemas).await;
    if cfg.keep {
        println!("  kept schemas: {} {}", schemas[0], schemas[1]);
    } else {
        for s in &schemas {
            if let Err(e) = admin
                .batch_execute(&format!("DROP SCHEMA IF EXISTS {s} CASCADE"))
                .await
            {
                println!("  could not drop schema {s}: {e}");
            }
        }
    }
    println!();
    result
}

async fn pg_phases(
    cfg: &Config,
    fx: &Fixtures,
    corpus: &[Transcript],
    schemas: &[String; 2],
) -> BenchResult<()> {
    let open = |schema: &str| {
        let config = StoreConfig {
            pg_schema: Some(schema.to_owned()),
            pg_pool_size: 4,
            ..StoreConfig::new(cfg.pg_url.clone())
        };
        async move { Store::open(&config).await }
    };
    let blob = open(&schemas[0]).await?;
    let plain = open(&schemas[1]).await?;
    let result = async {
        let mut clients = [
            pg_connect(&cfg.pg_url, Some(&schemas[0])).await?,
            pg_connect(&cfg.pg_url, Some(&schemas[1])).await?,
        ];
        let mut counts = Counts::default();
        let mut loaded = 0;
        for target in [cfg.small, cfg.large] {
            let range = loaded..target;
            let t = Instant::now();
            let [c0, c1] = &mut clients;
            let (a, b) = tokio::join!(
                pg_load(c0, fx, corpus, range.clone(), true),
                pg_load(c1, fx, corpus, range.clone(), false)
            );
            let (ca, cb) = (a?, b?);
            if ca != cb {
                return Err("the two PostgreSQL loads disagree".into());
            }
            let copied = t.elapsed();
            let (va, vb) = tokio::join!(pg_vacuum(&clients[0]), pg_vacuum(&clients[1]));
            let (va, vb) = (va?, vb?);
            counts.merge(&ca);
            loaded = target;
            println!(
                "  populated {} -> {} runs ({} new, both schemas concurrently): {} (COPY {}, then VACUUM ANALYZE blobs {}, plain {})",
                fmt_count(range.start),
                fmt_count(target),
                range.end - range.start,
                secs(t.elapsed()),
                secs(copied),
                secs(va),
                secs(vb)
            );
            println!("    blobs: {}", pg_sizes(&clients[0]).await?);
            println!("    plain: {}", pg_sizes(&clients[1]).await?);
            let t = Instant::now();
            measure("postgres", target, &Pair { blob: &blob, plain: &plain }, &counts).await?;
            println!("  (timed in {})", secs(t.elapsed()));
            pg_breakdown(&clients).await?;
        }
        Ok(())
    }
    .await;
    close(blob).await;
    close(plain).await;
    result
}

// ----- main -----

fn main() -> BenchResult<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(run())
}

async fn run() -> BenchResult<()> {
    let cfg = Config::from_env();
    let started = Instant::now();
    println!(
        "runs bench: {} and {} runs, {} agents, {WORKERS} workers, {TASKS} tasks; {CALLS} timed calls per query and table after {WARMUP} warm-up; page {PAGE}",
        fmt_count(cfg.small),
        fmt_count(cfg.large),
        AGENTS.len()
    );
    println!();
    let t = Instant::now();
    let (corpus, compress_time) = generate_corpus(TRANSCRIPTS);
    let generated = t.elapsed();
    if cfg.wants("compression") {
        report_compression(&corpus, compress_time);
        println!("(corpus generated in {})", secs(generated));
        println!();
    }
    let fx = Fixtures::new(cfg.large);
    if cfg.wants("sqlite") {
        sqlite_suite(&cfg, &fx, &corpus).await?;
    }
    if cfg.wants("postgres") {
        pg_suite(&cfg, &fx, &corpus).await?;
    }
    println!("total time: {}", secs(started.elapsed()));
    Ok(())
}
