//! The command line: `shepherd serve` and `migrate` run the server side;
//! the other verbs talk to a running server over HTTP, in the manner of
//! `gh` and `kubectl` (tables for people, `-o json` for scripts).
//!
//! The arguments live in [`args`]; each family of verbs in its own module
//! (server-side verbs in [`admin`], then [`task`], [`runs`], [`events`] and
//! [`workers`]); this module only starts the runtime and dispatches.

pub mod admin;
pub mod args;
pub mod backup;
pub mod chat;
pub mod completion;
pub mod events;
pub mod hosts;
pub mod input;
pub mod migrate_store;
pub mod output;
pub mod prune_branches;
pub mod resources;
pub mod runs;
pub mod session;
pub mod task;
pub mod usage;
pub mod users;
pub mod webhooks;
pub mod workers;

use std::process::ExitCode;

pub use args::*;

/// Runs `shepherd shim`: one synchronous loop around one child, no runtime.
pub fn run_shim(flags: &ShimFlags) -> ExitCode {
    // Before it reads a run (a spare) or starts its agent: its environment
    // holds the agent's, run token included, and its directory the run's
    // files. The agent's exec makes the agent dumpable again.
    crate::own_secrets::not_dumpable();
    let code = if flags.stand_by {
        shepherd_runner::shim::stand_by(ShimFlags::parse_job)
    } else {
        match flags.to_shim_args() {
            Ok(args) => shepherd_runner::shim::main(args),
            Err(e) => {
                eprintln!("shepherd shim: {e}");
                2
            }
        }
    };
    ExitCode::from(code.clamp(0, 255) as u8)
}

/// Runs a parsed command line; returns the process exit code.
pub fn main(cli: Cli) -> ExitCode {
    // The shim is one synchronous loop around one child: no runtime.
    if let Command::Shim(flags) = &cli.command {
        return run_shim(flags);
    }
    // The server-side verbs create the data directory and what is in it:
    // private to this user, set before the runtime starts any thread.
    if matches!(
        cli.command,
        Command::Serve { .. }
            | Command::Runner { .. }
            | Command::Migrate
            | Command::Prune { .. }
            | Command::Backup { .. }
            | Command::Restore { .. }
            | Command::MigrateStore { .. }
    ) {
        crate::private_data::restrict_umask();
        // Not readable through `/proc` by the agents it runs as the same
        // user, and its secret settings out of its environment.
        crate::own_secrets::protect();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // These verbs log; their last word goes out in the log's format.
    let logs = matches!(
        cli.command,
        Command::Serve { .. } | Command::Runner { .. } | Command::Migrate
    );
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if logs => {
            admin::log_failure(&e.to_string());
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

pub(crate) type Result<T> = crate::server::anyhow_like::Result<T>;

async fn run(cli: Cli) -> Result<()> {
    let g = &cli.global;
    // A server named on the command line means nothing to the verbs that
    // work on this machine's configuration; say so instead of ignoring it.
    if g.server_given && cli.command.client_flags().is_none() {
        if let Command::Serve { .. } | Command::Migrate | Command::Config { .. } = &cli.command {
            return Err(
                "--server is for the verbs that talk to a server; this one reads the configuration (--config)"
                    .into(),
            );
        }
    }
    match &cli.command {
        Command::Serve { listen } => admin::serve(g, listen.as_deref()).await,
        Command::Runner {
            data_dir,
            replace_host,
            ..
        } => admin::runner(g, data_dir.clone(), *replace_host).await,
        Command::Migrate => admin::migrate(g).await,
        Command::Prune {
            transcripts_older_than,
            events_older_than,
            branches_older_than,
            ..
        } => {
            admin::prune(
                g,
                *transcripts_older_than,
                *events_older_than,
                *branches_older_than,
            )
            .await
        }
        Command::Backup {
            file, files_only, ..
        } => backup::backup(g, file, *files_only),
        Command::Restore {
            file,
            data_dir,
            force,
        } => backup::restore(file, data_dir, *force),
        Command::MigrateStore {
            from,
            to,
            pg_schema,
            batch,
        } => migrate_store::migrate_store(from, to, pg_schema.clone(), *batch).await,
        Command::Config { .. } => admin::config(g),
        Command::Completion { shell } => Ok(completion::print_script(*shell)?),
        Command::Task { cmd, .. } => task::task(g, cmd).await,
        Command::Runs { cmd, .. } => runs::runs(g, cmd).await,
        Command::Events { args, .. } => events::events(g, args).await,
        Command::Usage { args, .. } => usage::usage(g, args).await,
        Command::Workers { all, .. } => workers::workers(g, *all).await,
        Command::Hosts { .. } => hosts::hosts(g).await,
        Command::Chat { args, .. } => chat::chat(g, args).await,
        Command::Conversation { cmd, .. } => chat::conversation(g, cmd).await,
        Command::Session { cmd, .. } => session::session(g, cmd).await,
        Command::Attach { args, .. } => session::attach(g, args).await,
        Command::Ask { args, .. } => input::ask(g, args).await,
        Command::Inbox { args, .. } => input::inbox(g, args).await,
        Command::Answer { args, .. } => input::answer(g, args).await,
        Command::Webhooks { cmd, .. } => webhooks::run(g, cmd).await,
        Command::Users { cmd, .. } => users::users(g, cmd).await,
        Command::Tokens { cmd, .. } => users::tokens(g, cmd).await,
        Command::Resource { cmd, .. } => resources::run(g, cmd).await,
        Command::PermissionTool { .. } => {
            shepherd_mcp::permission_tool::serve_stdio(&g.server, g.token.as_deref()).await
        }
        Command::Mcp { .. } => shepherd_mcp::serve_stdio(&g.server, g.token.as_deref()).await,
        Command::Shim(_) => Err("the shim runs before the runtime starts".into()),
    }
}
