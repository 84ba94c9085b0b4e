//! The `annal` command-line tool.
//!
//! # Layout
//!
//! - `main.rs`: argument parsing and dispatch; maps each command's outcome to an exit code.
//! - `demo.rs`: `annal demo`, the whole pipeline on a temporary store with a short report.
//! - `inspect.rs`: `annal inspect`, the offline read-only store decoder.
//! - `doctor.rs`: `annal doctor`, credential-store diagnostics.
//! - `verify.rs`: `annal verify`, the read-only check of chunks, seals and the seal chain.
//! - `keyfile.rs`: reading a root key file for the offline tools.
//!
//! # Exit codes
//!
//! | code | meaning |
//! | --- | --- |
//! | 0 | success |
//! | 1 | the command ran and found a problem (for example a corrupt chunk, or no usable key store) |
//! | 2 | bad usage or input (unknown flag, unreadable or unsafe key file, not a store) |
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod demo;
mod doctor;
mod inspect;
mod keyfile;
mod verify;

/// annal: an encrypted, append-only local history of what computer-use agents did.
#[derive(Debug, Parser)]
#[command(name = "annal", version, about)]
struct Cli {
    /// The command to run.
    #[command(subcommand)]
    command: Command,
}

/// Every `annal` command.
#[derive(Debug, Subcommand)]
enum Command {
    /// Run the whole pipeline on a temporary store and print a short report (no set-up).
    Demo(demo::DemoArgs),
    /// Decode a store offline for forensics and interop (read-only; never writes).
    Inspect(inspect::InspectArgs),
    /// Report which credential stores are reachable, locked or missing.
    Doctor(doctor::DoctorArgs),
    /// Check a store's chunks, seals and seal chain (read-only); non-zero exit on any finding.
    Verify(verify::VerifyArgs),
}

fn main() -> ExitCode {
    // Before any thread exists: give the process its own kernel session keyring, so the
    // keyutils key store works in every thread spawned later (see annal_engine::keys::keyutils).
    // A failure here only makes that store unusable; `doctor` reports it.
    let _ = annal_engine::keys::establish_session_keyring();
    let cli = Cli::parse();
    match cli.command {
        Command::Demo(args) => demo::run(&args),
        Command::Inspect(args) => inspect::run(&args),
        Command::Doctor(args) => doctor::run(&args),
        Command::Verify(args) => verify::run(&args),
    }
}
