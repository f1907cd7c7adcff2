//! The `shepherd` command.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = shepherd::cli::Cli::parse();
    if cli.command.is_client() {
        // A client verb piped into `head` should end quietly when the pipe
        // closes, as `ls` does, not panic on "failed printing to stdout".
        // (The server keeps Rust's default, SIGPIPE ignored.)
        // SAFETY: setting a signal disposition before any thread starts.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    shepherd::cli::main(cli)
}
