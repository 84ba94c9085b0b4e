//! The owner's CLI as a person meets it: `annal` started as a fresh process against a warm
//! daemon, timed to its first byte on stdout and to its exit (issue 30, item 2).
//!
//! `cli_latency [ANNAL_BINARY]` (default `target/release/annal`; build it first with
//! `cargo build --release -p annal-actors --bin annal`). In a private temporary HOME and
//! runtime directory it enables a store (the daemon starts on demand and stays warm), captures
//! [`CAPTURED_ACTIONS`] actions through the daemon's socket, then runs each command
//! [`RUNS`] times and prints, per command:
//! - `cli.<name>.first_byte.{p50,p99}_ms`: from spawn to the first byte on stdout;
//! - `cli.<name>.exit.{p50,p99}_ms`: from spawn to exit.
//!
//! Commands: `list50` (`annal list 50 --json`), `status` (`annal status --json`), and
//! `version` (`annal --version`: the exec and start-up alone, the floor under the others).
//! The store, its key and its daemon are removed at the end (`annal stop`, `annal delete
//! --yes`, then the temporary directory); the namespace is this process's own, so a run that
//! was killed never stands in the next one's way.
#![allow(missing_docs)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

use annal_actors::daemon::{DaemonClient, Request};
use annal_bench::{print_figure, quantile};

/// Fresh processes per command.
const RUNS: usize = 50;

/// Actions captured before the timing (a `list 50` answers 50 events).
const CAPTURED_ACTIONS: usize = 200;

/// The namespace of the bench's store, before this process's id.
const NAMESPACE_PREFIX: &str = "cli-latency-bench-";

fn main() -> ExitCode {
    let binary = std::env::args()
        .nth(1)
        .map_or_else(|| PathBuf::from("target/release/annal"), PathBuf::from);
    match run(&binary) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("cli_latency: {error}");
            ExitCode::FAILURE
        }
    }
}

/// `annal` with the bench's environment and nothing else inherited.
fn annal(binary: &Path, home: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(binary);
    command
        .env_clear()
        .env("HOME", home)
        .env("XDG_RUNTIME_DIR", home.join("run"))
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .args([
            "--namespace",
            &format!("{NAMESPACE_PREFIX}{}", std::process::id()),
        ])
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null());
    command
}

fn run(binary: &Path) -> Result<(), String> {
    if !binary.is_file() {
        return Err(format!(
            "{} is not a file: build it with `cargo build --release -p annal-actors --bin annal` or name the binary",
            binary.display()
        ));
    }
    let home = tempfile::tempdir().map_err(|e| e.to_string())?;
    annal_actors::daemon::create_private_dir(&home.path().join("run"))
        .map_err(|e| e.to_string())?;
    let enabled = annal(binary, home.path(), &["enable"])
        .stdout(Stdio::null())
        .status()
        .map_err(|e| e.to_string())?;
    if !enabled.success() {
        return Err(format!("`annal enable` exited {enabled}"));
    }
    let timed = capture_and_time(binary, home.path());
    for cleanup in [&["stop"][..], &["delete", "--yes"][..]] {
        let _ = annal(binary, home.path(), cleanup)
            .stdout(Stdio::null())
            .status();
    }
    timed
}

fn capture_and_time(binary: &Path, home: &Path) -> Result<(), String> {
    let socket = annal(binary, home, &["socket"])
        .stdout(Stdio::piped())
        .output()
        .map_err(|e| e.to_string())?;
    let socket = PathBuf::from(String::from_utf8_lossy(&socket.stdout).trim());
    capture(&socket)?;
    for (name, args) in [
        ("list50", &["list", "50", "--json"][..]),
        ("status", &["status", "--json"][..]),
        ("version", &["--version"][..]),
    ] {
        let mut first_byte = Vec::with_capacity(RUNS);
        let mut exit = Vec::with_capacity(RUNS);
        for _ in 0..RUNS {
            let (first, done) = time_once(binary, home, args)?;
            first_byte.push(first);
            exit.push(done);
        }
        first_byte.sort_unstable();
        exit.sort_unstable();
        for (what, times) in [("first_byte", &first_byte), ("exit", &exit)] {
            for (q, label) in [(0.50, "p50"), (0.99, "p99")] {
                let ms = quantile(times, q) as f64 / 1_000_000.0;
                print_figure(
                    &format!("cli.{name}.{what}.{label}_ms"),
                    format!("{ms:.2}"),
                    "ms",
                );
            }
        }
    }
    Ok(())
}

/// One fresh process: nanoseconds to its first byte on stdout, and to its exit.
fn time_once(binary: &Path, home: &Path, args: &[&str]) -> Result<(u64, u64), String> {
    let started = Instant::now();
    let mut child = annal(binary, home, args)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let mut first = [0u8; 1];
    let read = stdout.read(&mut first).map_err(|e| e.to_string())?;
    let first_byte = started.elapsed();
    if read == 0 {
        return Err(format!("`annal {}` printed nothing", args.join(" ")));
    }
    let mut rest = Vec::new();
    stdout.read_to_end(&mut rest).map_err(|e| e.to_string())?;
    let status = child.wait().map_err(|e| e.to_string())?;
    let exit = started.elapsed();
    if !status.success() {
        return Err(format!("`annal {}` exited {status}", args.join(" ")));
    }
    let ns = |d: std::time::Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    Ok((ns(first_byte), ns(exit)))
}

/// [`CAPTURED_ACTIONS`] actions (started and completed) through the daemon's socket, then a
/// flush.
fn capture(socket: &Path) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let mut client = DaemonClient::connect(socket)
            .await
            .map_err(|e| e.to_string())?;
        for _ in 0..CAPTURED_ACTIONS {
            let started = decode(serde_json::json!({
                "op": "action_started",
                "capability": "click",
                "application": {"bundle_id": "org.example.editor", "display_name": "Editor"}
            }))?;
            let reply = client.request(&started).await.map_err(|e| e.to_string())?;
            let completed = decode(serde_json::json!({
                "op": "action_completed",
                "action": reply["action"],
                "outcome": {"effect": "confirmed", "route": "accessibility"}
            }))?;
            client
                .request(&completed)
                .await
                .map_err(|e| e.to_string())?;
        }
        client
            .request(&decode(serde_json::json!({"op": "flush"}))?)
            .await
            .map_err(|e| e.to_string())?;
        Ok(())
    })
}

/// A request from its wire form.
fn decode(value: serde_json::Value) -> Result<Request, String> {
    serde_json::from_value(value).map_err(|e| e.to_string())
}
