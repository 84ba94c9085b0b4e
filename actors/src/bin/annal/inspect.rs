//! `annal inspect STORE --key-hex-file FILE [--json]`.

use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `annal inspect`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// The store root directory.
    pub store: PathBuf,
    /// A file holding the 32-byte namespace root key as 64 hex characters. Must not be readable
    /// by group or others.
    #[arg(long)]
    pub key_hex_file: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs `annal inspect`.
pub fn run(_args: &InspectArgs) -> ExitCode {
    eprintln!("annal inspect: not implemented yet");
    ExitCode::from(2)
}
