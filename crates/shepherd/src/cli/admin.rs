//! Server-side verbs: `serve`, `migrate`, `runner` and `prune`. They read
//! the configuration file rather than talking to a server.

use std::path::PathBuf;
use std::time::Duration;

use crate::config::Config;

use super::output::print_data;
use super::{Global, Output, Result};

fn init_tracing(config: &Config) {
    let filter = crate::config::log_filter(&config.log).unwrap_or_else(|_| "info".into());
    install_logger(filter, config.log_json);
    // Found while loading, before there was a logger to say them: said now,
    // so that they come out in the format chosen (a JSON collector would
    // otherwise get a line it cannot parse).
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
}

/// Whether the process's logger is installed (then errors go through it).
static LOGGER: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn install_logger(filter: tracing_subscriber::EnvFilter, json: bool) {
    // Logs go to stderr (stdout is for a command's output); colour codes
    // only when a person is watching it, never into files or collectors.
    use std::io::IsTerminal;
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(|| LogLine(Vec::new()))
        .with_ansi(colour);
    let installed = if json {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
    if installed.is_ok() {
        LOGGER.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Says why a logging verb (`serve`, `runner`, `migrate`) failed: through
/// its logger when there is one. When the configuration itself failed to
/// load there is none yet; then `SHEPHERD_LOG_FORMAT=json` in the
/// environment still gets a JSON line, the format a collector expects.
pub fn log_failure(message: &str) {
    if !LOGGER.load(std::sync::atomic::Ordering::SeqCst) {
        let json = std::env::var("SHEPHERD_LOG_FORMAT").is_ok_and(|f| f.trim() == "json");
        if !json {
            eprintln!("error: {message}");
            return;
        }
        install_logger("error".into(), true);
    }
    tracing::error!("{message}");
}

/// Prints the configuration's warnings for the verbs that do not log.
fn print_warnings(config: &Config) {
    for warning in &config.warnings {
        eprintln!("warning: {warning}");
    }
}

/// The progress display on screen, if any: log lines are written around it
/// (see [`LogLine`]) instead of through it.
static ACTIVE_PROGRESS: std::sync::Mutex<Option<indicatif::ProgressBar>> =
    std::sync::Mutex::new(None);

/// One log event, written to stderr when dropped; while a progress display
/// is drawn, the display is lifted for the write so the two never share a line.
struct LogLine(Vec<u8>);

impl std::io::Write for LogLine {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LogLine {
    fn drop(&mut self) {
        use std::io::Write;
        let write = || {
            let _ = std::io::stderr().write_all(&self.0);
        };
        let bar = ACTIVE_PROGRESS.lock().ok().and_then(|b| b.clone());
        match bar {
            Some(bar) => bar.suspend(write),
            None => write(),
        }
    }
}

pub(super) fn load_config(global: &Global) -> Result<Config> {
    // The secret settings are no longer in the environment (`own_secrets`).
    Ok(Config::load_with(
        global.config.as_deref(),
        &crate::own_secrets::var,
    )?)
}

pub async fn serve(g: &Global, listen: Option<&str>) -> Result<()> {
    let mut config = load_config(g)?;
    if let Some(l) = listen {
        config.listen = crate::config::resolve_listen(l).map_err(|e| format!("--listen: {e}"))?;
    }
    init_tracing(&config);
    config.check_exposure()?;
    let database = crate::private_data::sqlite_path(&config.database_url);
    crate::private_data::tighten_and_log(&config.data_dir, database.as_deref());
    let listener = crate::server::bind(config.listen, config.listen_backlog)
        .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    crate::server::run(config, listener, crate::server::shutdown_signal()).await
}

pub async fn runner(g: &Global, data_dir: Option<PathBuf>, replace_host: bool) -> Result<()> {
    let config = load_config(g)?;
    init_tracing(&config);
    if config.agents.is_empty() && config.sessions_root.is_none() {
        return Err(
            "no agents configured and no sessions root: declare [agents.NAME] tables \
in shepherd.toml, or set sessions_root (SHEPHERD_SESSIONS_ROOT) to host sessions"
                .into(),
        );
    }
    let token = g.token.clone().or_else(|| config.auth_token.clone());
    let data_dir = data_dir.unwrap_or_else(|| config.data_dir.clone());
    crate::private_data::tighten_and_log(&data_dir, None);
    let mut rc =
        shepherd_runner::RunnerConfig::new(&g.server, token, config.agents.clone(), data_dir);
    rc.child_umask = crate::private_data::inherited_umask();
    rc.heartbeat_interval = config.runner_heartbeat;
    rc.cancel_grace = config.cancel_grace;
    rc.set_heartbeat_timeout(config.heartbeat_timeout);
    rc.host = shepherd_runner::HostMode::Register(shepherd_runner::host::HostSetup {
        name: rc.name.clone(),
        sessions_root: config.sessions_root.clone(),
        enrollment_token: config.host_enrollment_token.clone(),
        replace: replace_host,
    });
    let stop = tokio_util::sync::CancellationToken::new();
    let signal_stop = stop.clone();
    tokio::spawn(async move {
        crate::server::shutdown_signal().await;
        signal_stop.cancel();
    });
    tracing::info!(
        server = g.server,
        agents = config.agents.len(),
        sessions_root = config
            .sessions_root
            .as_ref()
            .map(|r| r.display().to_string()),
        "runner starting"
    );
    shepherd_runner::run(rc, stop).await.map_err(|e| e.into())
}

pub async fn migrate(g: &Global) -> Result<()> {
    let config = load_config(g)?;
    init_tracing(&config);
    let spinner = progress(
        format!(
            "applying migrations to {}",
            crate::config::redact_url(&config.database_url)
        ),
        true,
    );
    let store = shepherd_store::Store::open(&crate::config::store_config(&config)?).await;
    spinner.finish_and_clear();
    let store = store?;
    println!(
        "migrations applied ({}: {})",
        store.backend_name(),
        crate::config::redact_url(store.url())
    );
    store.close();
    Ok(())
}

/// What `prune` did, for `-o json|yaml`.
#[derive(Debug, serde::Serialize)]
pub struct PruneReport {
    /// The database pruned (password redacted).
    pub database: String,
    /// The data directory of the configuration.
    pub data_dir: std::path::PathBuf,
    /// Runs whose transcripts were removed, and the bytes that freed.
    pub transcripts: Option<PrunedTranscripts>,
    /// Events deleted.
    pub events: Option<u64>,
}

#[derive(Debug, serde::Serialize)]
pub struct PrunedTranscripts {
    pub runs: u64,
    pub bytes: i64,
}

pub async fn prune(
    g: &Global,
    transcripts_older_than: Option<Duration>,
    events_older_than: Option<Duration>,
    branches_older_than: Option<Duration>,
) -> Result<()> {
    // Prune works on a database directly (it is an operator's maintenance
    // verb, like `migrate`); a server elsewhere is pruned where it runs, or
    // by its own retention settings.
    if g.server_given {
        return Err(format!(
            "prune works on the database of the configuration (--config or SHEPHERD_CONFIG), \
not through a server: run it on the server's machine without --server {}, or set \
event_retention_days / transcript_retention_days in that server's configuration",
            g.server
        )
        .into());
    }
    let config = load_config(g)?;
    print_warnings(&config);
    if transcripts_older_than.is_none()
        && events_older_than.is_none()
        && branches_older_than.is_none()
    {
        return Err(
            "nothing to prune: give --transcripts-older-than, --events-older-than and/or --branches-older-than".into(),
        );
    }
    let database = crate::config::redact_url(&config.database_url);
    // Opening a SQLite database creates it: pruning a file that is not
    // there would only make an empty one in the wrong place.
    if let Ok(shepherd_store::DatabaseUrl::Sqlite(path)) =
        shepherd_store::parse_database_url(&config.database_url)
    {
        if !path.exists() {
            return Err(format!(
                "no database at {} (data directory {}): point --config or SHEPHERD_DATA_DIR \
at the server's data",
                path.display(),
                config.data_dir.display()
            )
            .into());
        }
    }
    let table = g.output == Output::Table;
    if table {
        println!(
            "pruning {database} (data directory {})",
            config.data_dir.display()
        );
    }
    let store = shepherd_store::Store::open(&crate::config::store_config(&config)?).await?;
    let now = shepherd_store::now_ms();
    let mut report = PruneReport {
        database,
        data_dir: config.data_dir.clone(),
        transcripts: None,
        events: None,
    };
    if let Some(age) = transcripts_older_than {
        let spinner = progress("pruning transcripts".into(), table);
        let pruned = store.prune_transcripts(now - age.as_millis() as i64).await;
        spinner.finish_and_clear();
        let (runs, bytes) = pruned?;
        if table {
            println!(
                "pruned transcripts of {runs} runs, freeing {} (run rows kept)",
                human_bytes(bytes)
            );
        }
        report.transcripts = Some(PrunedTranscripts {
            runs: runs as u64,
            bytes,
        });
    }
    if let Some(age) = events_older_than {
        let spinner = progress("pruning events".into(), table);
        let counter = spinner.clone();
        let pruned = store
            .prune_events_with(now - age.as_millis() as i64, move |n| {
                counter.set_message(format!("pruning events: {n} deleted"))
            })
            .await;
        spinner.finish_and_clear();
        let n = pruned?;
        if table {
            println!("pruned {n} events");
        }
        report.events = Some(n);
    }
    if let Some(age) = branches_older_than {
        // Runners' hosts are reached through the server of this
        // configuration, which holds their links.
        let server =
            shepherd_client::Client::new(&config.self_url(), config.auth_token.clone()).ok();
        super::prune_branches::prune(
            &store,
            &crate::server::workspace_repos(&config),
            server,
            now - age.as_millis() as i64,
        )
        .await?;
    }
    store.close();
    if !table {
        print_data(g.output, &report);
    }
    Ok(())
}

/// `shepherd config`: the effective configuration with each value's source.
pub fn config(g: &Global) -> Result<()> {
    let config = load_config(g)?;
    print_warnings(&config);
    let rows = config.effective();
    if g.output != Output::Table {
        print_data(g.output, &rows);
        return Ok(());
    }
    match &config.source {
        Some(p) => println!("# configuration file: {}", p.display()),
        None => println!("# no configuration file (defaults and environment)"),
    }
    let width = rows.iter().map(|r| r.key.len()).max().unwrap_or(0);
    let vwidth = rows
        .iter()
        .map(|r| r.value.chars().count())
        .filter(|&n| n <= 48)
        .max()
        .unwrap_or(0);
    for r in &rows {
        println!("{:<width$}  {:<vwidth$}  {}", r.key, r.value, r.source);
    }
    Ok(())
}

/// A spinner with a message and the elapsed time on stderr, for operations
/// that can take minutes on a large database. indicatif draws nothing when
/// stderr is not a terminal, so scripts and logs see only the result.
pub(super) fn progress(message: String, show: bool) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new_spinner();
    if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
        bar.set_style(style);
    }
    bar.set_message(message);
    bar.enable_steady_tick(Duration::from_millis(120));
    if let Ok(mut active) = ACTIVE_PROGRESS.lock() {
        *active = Some(bar.clone());
    }
    bar
}

pub(super) fn human_bytes(b: i64) -> String {
    match b {
        b if b < 1024 => format!("{b} B"),
        b if b < 1024 * 1024 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{:.1} MiB", b as f64 / 1024.0 / 1024.0),
    }
}
