//! `annal doctor [--json]`.

use std::process::ExitCode;

/// Arguments of `annal doctor`.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `annal doctor`.
pub fn run(_args: &DoctorArgs) -> ExitCode {
    eprintln!("annal doctor: not implemented yet");
    ExitCode::from(2)
}
