//! The `shepherd` command.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = shepherd::cli::Cli::parse();
    shepherd::cli::main(cli)
}
