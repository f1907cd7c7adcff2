//! Pieces shared by the benches that start the real `shepherd` binary or
//! read processes' figures from `/proc` (`sse`, `load`, `runner`, `fleet`).

use std::path::{Path, PathBuf};

/// `SHEPHERD_BENCH_BIN`, else the `shepherd` binary of this bench's own
/// profile directory (`<target>/release/deps/<bench>-…` →
/// `<target>/release/shepherd`, which Cargo builds for a bench).
#[allow(dead_code)]
pub fn server_binary() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("SHEPHERD_BENCH_BIN").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(bin));
    }
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?.parent()?.join("shepherd");
    bin.is_file().then_some(bin)
}

/// Raises the soft open-files limit (inherited by the server) to at least
/// `want`, as far as the hard limit allows; returns the limit in force.
#[allow(dead_code)]
pub fn raise_nofile(want: libc::rlim_t) -> libc::rlim_t {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid, owned struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) != 0 {
            return 0;
        }
        if r.rlim_cur < want {
            r.rlim_cur = if r.rlim_max == libc::RLIM_INFINITY {
                want
            } else {
                want.min(r.rlim_max)
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
            }
        }
    }
    r.rlim_cur
}

/// A `kB` field of `/proc/<pid>/status` (`VmRSS`, `RssAnon`, ...).
#[allow(dead_code)]
pub fn status_kb(pid: u32, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

/// A process's proportional share of memory (`Pss` of
/// `/proc/<pid>/smaps_rollup`, kB): shared libraries are split between the
/// processes that map them, so a sum over many small processes is fair.
#[allow(dead_code)]
pub fn pss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("Pss:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// User + system CPU seconds of a process (`"self"` or a pid); 0 once gone.
#[allow(dead_code)]
pub fn cpu_secs(pid: &str) -> f64 {
    shepherd_testkit::cpu_secs_in(std::path::Path::new(&format!("/proc/{pid}/stat")))
}

/// Busy CPU seconds of the whole machine (everything but idle and iowait).
#[allow(dead_code)]
pub fn machine_busy_secs() -> f64 {
    let text = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(line) = text.lines().find(|l| l.starts_with("cpu ")) else {
        return 0.0;
    };
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1);
    (total - idle) as f64 / hz as f64
}

/// CPU seconds used so far by every process named `postgres` (the
/// database's share of a case's work), by pid.
#[allow(dead_code)]
pub fn postgres_cpu() -> std::collections::HashMap<u32, f64> {
    let mut out = std::collections::HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if comm.trim_end() == "postgres" {
            out.insert(pid, cpu_secs(&pid.to_string()));
        }
    }
    out
}

/// CPU seconds the `postgres` processes used between two [`postgres_cpu`]
/// readings (processes started in between count from zero).
#[allow(dead_code)]
pub fn postgres_cpu_since(before: &std::collections::HashMap<u32, f64>) -> f64 {
    postgres_cpu()
        .iter()
        .map(|(pid, now)| (now - before.get(pid).copied().unwrap_or(0.0)).max(0.0))
        .sum()
}

/// Drops a throwaway PostgreSQL schema (errors are printed, not fatal).
#[allow(dead_code)]
pub async fn drop_pg_schema(url: &str, schema: &str) {
    match tokio_postgres::connect(url, tokio_postgres::NoTls).await {
        Ok((client, conn)) => {
            tokio::spawn(conn);
            let sql = format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE");
            if let Err(e) = client.batch_execute(&sql).await {
                eprintln!("could not drop schema {schema}: {e}");
            }
        }
        Err(e) => eprintln!("could not drop schema {schema}: {e}"),
    }
}

/// [`drop_pg_schema`] from code that holds no runtime (a `Drop`, a thread).
#[allow(dead_code)]
pub fn drop_pg_schema_blocking(url: &str, schema: &str) {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    rt.block_on(drop_pg_schema(url, schema));
}

/// The first number of each of the built-in runner's run directories' file
/// `name` (`shim`, `agent`) under data directory `data_dir`: the pids of
/// the processes it holds (an agent's pid is also its process group).
#[allow(dead_code)]
pub fn run_pids(data_dir: &Path, name: &str) -> Vec<u32> {
    let runs = data_dir.join("runner").join("runs");
    std::fs::read_dir(runs)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join(name)).ok())
        .filter_map(|t| t.split_whitespace().next()?.parse().ok())
        .collect()
}
