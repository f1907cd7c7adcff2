//! `shepherd serve`: opens the store, starts the background loops and the
//! HTTP server, and shuts all of it down in order.
//!
//! [`run`] takes a bound listener and a shutdown future, so tests start the
//! real server on `127.0.0.1:0`.

use std::future::Future;
use std::time::Duration;

use shepherd_api::{AppState, Settings};
use shepherd_store::Store;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::maintenance;

/// Opens the database named by `config` and applies migrations.
/// The OpenID provider of an `[oidc]` table (the loader checked the table
/// and resolved its secret).
fn oidc_provider(o: &shepherd_config::OidcConfig) -> Result<shepherd_api::oidc::Provider, String> {
    shepherd_api::oidc::Provider::new(shepherd_api::oidc::OidcSettings {
        issuer: o.issuer.clone(),
        client_id: o.client_id.clone(),
        client_secret: o.client_secret.clone().unwrap_or_default(),
        redirect_url: o.redirect_url.clone(),
        scopes: o.scopes.clone(),
        groups_claim: o.groups_claim.clone(),
        admin_groups: o.admin_groups.clone(),
        operator_groups: o.operator_groups.clone(),
        allowed_email_domains: o.allowed_email_domains.clone(),
        session_idle: Duration::from_secs(o.session_idle_secs),
        session_max: Duration::from_secs(o.session_max_secs),
    })
}

pub async fn open_store(config: &Config) -> anyhow_like::Result<Store> {
    let store = Store::open(&crate::config::store_config(config)?).await?;
    for (name, agent) in &config.agents {
        store
            .upsert_agent(
                name,
                agent
                    .worker_type
                    .as_deref()
                    .unwrap_or(shepherd_core::status::WorkerType::Builtin.as_str()),
                agent.capabilities.clone(),
                agent.max_concurrent,
            )
            .await?;
        store
            .set_agent_retry(name, agent.max_attempts, agent.retry_backoff)
            .await?;
    }
    Ok(store)
}

/// The HTTP settings a configuration implies, for a server listening on
/// `port`.
pub fn settings(config: &Config, port: u16) -> anyhow_like::Result<Settings> {
    Ok(Settings {
        auth_token: config.auth_token.clone(),
        host_enrollment_token: config.host_enrollment_token.clone(),
        body_limit_bytes: config.body_limit_bytes,
        heartbeat_timeout: config.heartbeat_timeout,
        claim_ttl: config.claim_ttl,
        cancel_grace: config.cancel_grace,
        agent_cancel_grace: config
            .agents
            .iter()
            .filter_map(|(name, a)| {
                a.cancel_grace_secs
                    .map(|s| (name.clone(), Duration::from_secs(s)))
            })
            .collect(),
        agent_permissions: config
            .agents
            .iter()
            .map(|(name, a)| (name.clone(), a.permission_policy()))
            .collect(),
        agent_stuck_after: config
            .agents
            .iter()
            .filter_map(|(name, a)| a.stuck_after.map(|d| (name.clone(), d.0)))
            .collect(),
        allowed_origins: config.allowed_origins.clone(),
        max_requests: config.max_requests,
        max_streams: config.max_streams,
        max_worker_requests: config.max_worker_requests,
        send_timeout: config.send_timeout,
        hosts: host_rule(config, port)?,
        header_timeout: config.header_timeout,
        body_timeout: config.body_timeout,
        max_requests_per_token: config.max_requests_per_token,
        workspace_repos: workspace_repos(config),
        ..Settings::default()
    })
}

/// The names this server answers to: loopback and addresses on its port,
/// and the hosts its configuration names (advertise URL, allowed origins,
/// allowed hosts).
fn host_rule(config: &Config, port: u16) -> anyhow_like::Result<shepherd_api::host::HostRule> {
    let mut rule = shepherd_api::host::HostRule::new(port, false);
    if let Some(url) = &config.advertise_url {
        rule.allow_url(url)
            .map_err(|e| format!("SHEPHERD_ADVERTISE_URL: {e}"))?;
    }
    for origin in &config.allowed_origins {
        rule.allow_url(origin)
            .map_err(|e| format!("SHEPHERD_ALLOWED_ORIGINS: {e}"))?;
    }
    for host in &config.allowed_hosts {
        rule.allow_host(host)
            .map_err(|e| format!("SHEPHERD_ALLOWED_HOSTS: {e}"))?;
    }
    Ok(rule)
}

/// The repositories configured worktree agents work in: the only ones the
/// server reads runs' diffs from, whatever a worker reports.
pub fn workspace_repos(config: &Config) -> Vec<std::path::PathBuf> {
    config
        .agents
        .values()
        .filter_map(|a| a.worktree_repo().map(|(repo, _)| repo.to_owned()))
        .collect()
}

/// Binds a listening socket with the configured backlog (`listen_backlog`;
/// `TcpListener::bind` always asks for 1024). Linux silently caps the
/// backlog at `net.core.somaxconn`.
pub fn bind(addr: std::net::SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    // As `TcpListener::bind` does: a restart can bind while connections of
    // the previous process linger in TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(backlog)
}

/// Serves until `shutdown` resolves; returns once everything has stopped.
pub async fn run(
    mut config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow_like::Result<()> {
    config.check_exposure()?;
    if config.oidc.is_some() && config.auth_token.is_none() && !config.agents.is_empty() {
        // With single sign-on nobody is anonymous, the built-in runner
        // included: it gets an operator token that lives in this process
        // only (people sign in; scripts use their own tokens).
        config.auth_token = Some(shepherd_store::random_hex(32));
    }
    // The certificate is read before anything starts, so that a bad one is
    // a start-up error rather than a server that fails every handshake.
    let tls = match &config.tls {
        Some(files) => Some(
            shepherd_api::tls::ServedCert::load_checked(&files.cert, &files.key, files.strict)
                .map_err(|e| {
                    format!(
                        "SHEPHERD_TLS_CERT / SHEPHERD_TLS_KEY: {} ({})",
                        e.message, e.code
                    )
                })?,
        ),
        None => None,
    };
    let store = open_store(&config).await?;
    recover(&store).await?;
    let token = CancellationToken::new();
    let port = listener.local_addr()?.port();
    let state = AppState::new(store.clone(), settings(&config, port)?, token.clone());
    let tracker = TaskTracker::new();
    let sessions = crate::session_host::manager(&config, store.clone(), listener.local_addr()?)?;
    let state = state.with_sessions(sessions.clone());
    // This node is a host of the fleet: recorded before anything is served,
    // and said to be there while it runs (`maintenance`).
    let own_host = crate::session_host::declaration(&config, sessions.config());
    // A node that cannot be recorded (a node_id the host list cannot hold)
    // still serves: it is only missing from the list.
    if let Err(e) = store.record_server_host(own_host.clone()).await {
        tracing::warn!(error = %e, node = own_host.id, "this node is not listed among the hosts");
    }
    let state = match &config.oidc {
        Some(o) => state.with_oidc(std::sync::Arc::new(oidc_provider(o)?)),
        None => state,
    };
    // Ends every PTY when the server stops (they are restored on attach).
    tracker.spawn(sessions.run(token.clone()));
    maintenance::start(&tracker, &state, &config, &own_host.id, token.clone());
    // The `[[webhooks]]` tables become subscriptions before anything is
    // served, so that nothing logged from now on escapes them.
    let (added, changed, removed) = store
        .sync_config_webhooks(crate::webhooks::configured(&config))
        .await
        .map_err(|e| format!("webhooks from the configuration: {e}"))?;
    if added + changed + removed > 0 {
        tracing::info!(added, changed, removed, "webhooks from the configuration");
    }
    let delivery = crate::webhooks::Delivery::new(
        store.clone(),
        crate::session_host::node_id(&config)?,
        crate::webhooks::Tuning::from_config(&config),
    )?;
    tracker.spawn(std::sync::Arc::new(delivery).run(token.clone()));
    if let Some(cert) = &tls {
        // SIGHUP is taken before the server answers anyone, so that a
        // reload asked for as soon as it is up cannot end the process
        // (SIGHUP's default action).
        let hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .map_err(|e| format!("cannot handle SIGHUP (TLS reload): {e}"))?;
        tracker.spawn(cert.clone().watch(
            Some(hangup),
            shepherd_api::tls::POLL_INTERVAL,
            token.clone(),
        ));
    }
    if let Some(addr) = config.metrics_listen {
        let metrics = bind(addr, config.listen_backlog)
            .map_err(|e| format!("SHEPHERD_METRICS_LISTEN: cannot listen on {addr}: {e}"))?;
        let addr = metrics.local_addr()?;
        tracing::info!(%addr, "serving /metrics without a token");
        announce(&format!(
            "shepherd serves /metrics at http://{addr}/metrics"
        ));
        let state = state.clone();
        tracker.spawn(async move {
            if let Err(e) = shepherd_api::metrics::serve_metrics(metrics, state).await {
                tracing::error!(error = %e, "the metrics listener stopped");
            }
        });
    }
    tracker.close();
    let addr = listener.local_addr()?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    tracing::info!(%addr, scheme, database = store.url(), backend = store.backend_name(), "shepherd is serving");
    // Whatever the log level, one line on stdout tells where the server
    // listens: with `SHEPHERD_LISTEN=127.0.0.1:0` it is the only place the
    // port it chose is told (tests and scripts read it from there).
    announce(&format!("shepherd is serving {scheme}://{addr}"));
    // The built-in runner is a worker like any other, but its requests do
    // not travel: they are handed to this server's own router (the same
    // authentication, checks, limits and error codes as over HTTP, without
    // the loopback socket and the HTTP encoding and parsing either way).
    // Its agents still get the listener's address.
    let runner_stop = CancellationToken::new();
    let runner = if config.agents.is_empty() {
        None
    } else {
        let mut local = addr;
        if local.ip().is_unspecified() {
            local.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        let mut rc = shepherd_runner::RunnerConfig::new(
            &format!("{scheme}://{local}"),
            config.auth_token.clone(),
            config.agents.clone(),
            config.data_dir.clone(),
        );
        rc.transport = Some(shepherd_runner::SharedTransport(std::sync::Arc::new(
            shepherd_mcp::in_process::InProcess::serving_at(
                shepherd_api::router(state.clone()),
                rc.server.clone(),
            ),
        )));
        rc.heartbeat_interval = config.runner_heartbeat;
        rc.poll_interval = config.runner_poll;
        rc.cancel_grace = config.cancel_grace;
        rc.set_heartbeat_timeout(config.heartbeat_timeout);
        // A restart of the server leaves agents running under their shims;
        // the next start with this data directory carries their runs on.
        rc.detach_on_stop = true;
        rc.child_umask = crate::private_data::inherited_umask();
        rc.host = shepherd_runner::HostMode::Known(own_host.id.clone());
        let stop = runner_stop.clone();
        Some(tokio::spawn(async move {
            if let Err(e) = shepherd_runner::run(rc, stop).await {
                tracing::error!(error = %e, "the built-in runner stopped");
            }
        }))
    };
    let stop = token.clone();
    let shutdown = async move {
        tokio::select! {
            _ = shutdown => {}
            _ = stop.cancelled() => {}
        }
        // The runner leaves its agents to their shims (and delivers what it
        // can) while the server still answers.
        if let Some(r) = runner {
            runner_stop.cancel();
            let _ = tokio::time::timeout(std::time::Duration::from_secs(20), r).await;
        }
        tracing::info!("shutting down: no new connections; finishing requests in flight");
    };
    match tls {
        Some(cert) => {
            let options = shepherd_api::tls::TlsOptions::new(cert);
            shepherd_api::tls::serve(listener, state, options, shutdown).await?
        }
        None => shepherd_api::serve(listener, state, shutdown).await?,
    }
    token.cancel();
    tracker.wait().await;
    store.close();
    tracing::info!("stopped");
    Ok(())
}

/// Eager recovery at start-up (the worker registry contract): the registry is rebuilt from the
/// tables, a report is logged and recorded, and a snapshot of every worker
/// is written. Claims of workers that stay silent expire one heartbeat
/// timeout after this start (the sweeper's `not_before`), not earlier.
pub async fn recover(store: &Store) -> anyhow_like::Result<()> {
    let shepherd_store::Listing { items: workers, .. } = store
        .list_workers(shepherd_store::WorkerFilter {
            include_closed: true,
            ..Default::default()
        })
        .await?;
    let added = workers.iter().filter(|w| w.status != "terminated").count();
    let ignored = workers.len() - added;
    let updated = workers
        .iter()
        .filter(|w| w.status != "terminated" && w.active_claims > 0)
        .count();
    let ts = shepherd_core::time::to_rfc3339(shepherd_store::now_ms());
    tracing::info!(added, updated, ignored, timestamp = %ts, "recovered workers from storage");
    store
        .record_event(shepherd_core::event::NewEvent::typed(
            shepherd_core::event::kind::RECOVERY_REPORT,
            Default::default(),
            &shepherd_core::event::payloads::ServerRecovered {
                added: added as i64,
                updated: updated as i64,
                ignored: ignored as i64,
                timestamp: ts,
            },
        ))
        .await?;
    store.snapshot_workers("startup").await?;
    Ok(())
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {}
        _ = term => {}
    }
}

/// A tiny boxed-error result for the binary's own plumbing.
pub mod anyhow_like {
    pub type Error = Box<dyn std::error::Error + Send + Sync + 'static>;
    pub type Result<T> = std::result::Result<T, Error>;
}

/// One line on stdout for whoever started the server. A reader that went
/// away (`shepherd serve | head -1`) must not stop the server, as
/// `println!` would by panicking on the broken pipe.
fn announce(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}
