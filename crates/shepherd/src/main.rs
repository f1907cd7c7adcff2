//! The `shepherd` command.

fn main() -> std::process::ExitCode {
    // The shim first: it is started for every run, on the way to the
    // agent's first step, and needs none of the rest.
    if let Some(shim) = shepherd::cli::ShimFlags::parse_if_shim() {
        return shepherd::cli::run_shim(&shim);
    }
    // A shell asking what to complete gets its answer and nothing else.
    shepherd::cli::completion::answer_if_asked();
    let cli = shepherd::cli::Cli::parse_args();
    if cli.command.is_client() || cli.command.only_prints() {
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
