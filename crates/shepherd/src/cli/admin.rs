//! Server-side verbs: `serve`, `migrate`, `runner` and `prune`. They read
//! the configuration file rather than talking to a server.

use std::path::PathBuf;
use std::time::Duration;

use crate::config::Config;

use super::{Global, Result};

fn init_tracing(config: &Config) {
    let filter =
        tracing_subscriber::EnvFilter::try_new(&config.log).unwrap_or_else(|_| "info".into());
    // Logs go to stderr (stdout is for a command's output); colour codes
    // only when a person is watching it, never into files or collectors.
    use std::io::IsTerminal;
    let colour = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_writer(std::io::stderr)
        .with_ansi(colour);
    if config.log_json {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn load_config(global: &Global) -> Result<Config> {
    Ok(Config::load(global.config.as_deref())?)
}

pub async fn serve(g: &Global, listen: Option<&str>) -> Result<()> {
    let mut config = load_config(g)?;
    if let Some(l) = listen {
        config.listen = crate::config::resolve_listen(l).map_err(|e| format!("--listen: {e}"))?;
    }
    init_tracing(&config);
    config.check_exposure()?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    crate::server::run(config, listener, crate::server::shutdown_signal()).await
}

pub async fn runner(g: &Global, data_dir: Option<PathBuf>) -> Result<()> {
    let config = load_config(g)?;
    init_tracing(&config);
    if config.agents.is_empty() {
        return Err("no agents configured: declare [agents.NAME] tables in shepherd.toml".into());
    }
    let token = g.token.clone().or_else(|| config.auth_token.clone());
    let mut rc = shepherd_runner::RunnerConfig::new(
        &g.server,
        token,
        config.agents.clone(),
        data_dir.clone().unwrap_or_else(|| config.data_dir.clone()),
    );
    rc.heartbeat_interval = config.runner_heartbeat;
    rc.cancel_grace = config.cancel_grace;
    rc.set_heartbeat_timeout(config.heartbeat_timeout);
    let stop = tokio_util::sync::CancellationToken::new();
    let signal_stop = stop.clone();
    tokio::spawn(async move {
        crate::server::shutdown_signal().await;
        signal_stop.cancel();
    });
    tracing::info!(
        server = g.server,
        agents = config.agents.len(),
        "runner starting"
    );
    shepherd_runner::run(rc, stop).await.map_err(|e| e.into())
}

pub async fn migrate(g: &Global) -> Result<()> {
    let config = load_config(g)?;
    init_tracing(&config);
    let store = shepherd_store::Store::open(&config.store_config()).await?;
    println!(
        "migrations applied ({}: {})",
        store.backend_name(),
        store.url()
    );
    store.close();
    Ok(())
}

pub async fn prune(
    g: &Global,
    transcripts_older_than: Option<Duration>,
    events_older_than: Option<Duration>,
    branches_older_than: Option<Duration>,
) -> Result<()> {
    let config = load_config(g)?;
    if transcripts_older_than.is_none()
        && events_older_than.is_none()
        && branches_older_than.is_none()
    {
        return Err(
            "nothing to prune: give --transcripts-older-than, --events-older-than and/or --branches-older-than".into(),
        );
    }
    let store = shepherd_store::Store::open(&config.store_config()).await?;
    let now = shepherd_store::now_ms();
    if let Some(age) = transcripts_older_than {
        let (runs, bytes) = store
            .prune_transcripts(now - age.as_millis() as i64)
            .await?;
        println!(
            "pruned transcripts of {runs} runs, freeing {} (run rows kept)",
            human_bytes(bytes)
        );
    }
    if let Some(age) = events_older_than {
        let n = store.prune_events(now - age.as_millis() as i64).await?;
        println!("pruned {n} events");
    }
    if let Some(age) = branches_older_than {
        super::prune_branches::prune(&store, now - age.as_millis() as i64).await?;
    }
    store.close();
    Ok(())
}

fn human_bytes(b: i64) -> String {
    match b {
        b if b < 1024 => format!("{b} B"),
        b if b < 1024 * 1024 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{:.1} MiB", b as f64 / 1024.0 / 1024.0),
    }
}
