//! `annal report` on a 100 MiB store: fills a store through the real engine's capture hook
//! (sessions, four applications, completed actions) until its history chunks reach
//! [`STORE_TARGET_BYTES`], then times `annal --no-daemon report` on it (the whole command: the
//! engine's start, every owner read through the gate, the page written) and prints
//! `FIGURE report.100mib.seconds` (the median of [`REPORT_RUNS`] runs); then the same through
//! the store's daemon, `FIGURE report.100mib.daemon_seconds` (the median of [`REPORT_RUNS`]
//! runs after the one that started it).
//!
//! Needs the release binary beside this example (`cargo build --release -p annal-actors --bin
//! annal` first) and the kernel keyring (the key is created in this process's session keyring,
//! which the `annal` child inherits, and destroyed at the end by `annal delete --yes`).
#![allow(missing_docs)]

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use annal_actors::{Engine, EngineConfig};
use annal_engine::entropy::OsEntropy;
use annal_engine::journal::OnQuota;
use annal_engine::keys::{CredentialNaming, KeyStoreChoice, Namespace, open_provider};
use annal_engine::storage::StoreLayout;
use annal_schema::{ActionOutcome, Application, Capability, Effect, Route};

/// The store's history size to reach, in bytes.
const STORE_TARGET_BYTES: u64 = 100 * 1024 * 1024;

/// The quota set for the fill, in bytes (above the target, so capture never stops).
const FILL_QUOTA_BYTES: u64 = 1024 * 1024 * 1024;

/// Actions captured between two size checks.
const FILL_BATCH_ACTIONS: usize = 4_000;

/// Most captured events waiting in the queue before the filler yields (no drops).
const FILL_QUEUE_HIGH_WATER_EVENTS: usize = 256;

/// Sessions the actions are spread over.
const FILL_SESSIONS: usize = 12;

/// Set to a directory: the store is filled there and kept (with its key), for profiling.
const KEEP_ENV: &str = "REPORT_BENCH_KEEP_DIR";

/// Timed report runs.
const REPORT_RUNS: usize = 3;

type Failure = String;

fn annal_binary() -> Result<PathBuf, Failure> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let binary = exe
        .parent()
        .and_then(Path::parent)
        .map(|dir| dir.join("annal"))
        .ok_or("no directory above this example")?;
    if binary.exists() {
        Ok(binary)
    } else {
        Err(format!(
            "{} is missing: cargo build --release -p annal-actors --bin annal",
            binary.display()
        ))
    }
}

fn catalog() -> Result<(Vec<Application>, Vec<Capability>), Failure> {
    let mut applications = Vec::new();
    for name in ["Firefox", "Text Editor", "Terminal", "LibreOffice"] {
        applications.push(
            Application::from_names(None, Some(name.to_owned())).map_err(|e| format!("{e:?}"))?,
        );
    }
    let mut capabilities = Vec::new();
    for name in ["input.pointer.click", "input.keyboard.type", "window.focus"] {
        capabilities.push(Capability::new(name).map_err(|e| e.to_string())?);
    }
    Ok((applications, capabilities))
}

/// Fills the store at `dir` to [`STORE_TARGET_BYTES`]; returns its history bytes.
fn fill(dir: &Path, namespace: &Namespace) -> Result<u64, Failure> {
    let provider = open_provider(
        KeyStoreChoice::Keyutils,
        CredentialNaming::Annal,
        Box::new(OsEntropy),
    )
    .map_err(|e| format!("the kernel keyring: {e}"))?;
    let config = EngineConfig::new(StoreLayout::in_namespace_dir(dir), namespace.clone());
    let engine = Engine::start(config, Arc::from(provider)).map_err(|e| e.to_string())?;
    engine.enable().map_err(|e| e.to_string())?;
    engine
        .set_quota(FILL_QUOTA_BYTES, OnQuota::StopCapture)
        .map_err(|e| e.to_string())?;
    let (applications, capabilities) = catalog()?;
    let hook = engine.capture();
    let sessions: Vec<_> = (0..FILL_SESSIONS)
        .map(|s| hook.session_started(&format!("bench session {s}")))
        .collect();
    let mut round = 0usize;
    let bytes = loop {
        for i in 0..FILL_BATCH_ACTIONS {
            while engine.queued_events() > FILL_QUEUE_HIGH_WATER_EVENTS {
                std::thread::sleep(Duration::from_micros(200));
            }
            let n = round * FILL_BATCH_ACTIONS + i;
            let token = hook.action_started(
                capabilities[n % capabilities.len()].clone(),
                Some(applications[(n / 7) % applications.len()].clone()),
                Some(&sessions[(n / 50) % sessions.len()]),
            );
            let effect = if n.is_multiple_of(23) {
                Effect::Failed
            } else {
                Effect::Confirmed
            };
            hook.action_completed(token, ActionOutcome::new(effect, Route::Accessibility));
        }
        engine.flush().map_err(|e| e.to_string())?;
        let used = engine.usage().map_err(|e| e.to_string())?.history_bytes;
        eprintln!("report bench: filled {used} bytes");
        if used >= STORE_TARGET_BYTES {
            break used;
        }
        round += 1;
    };
    for session in sessions {
        hook.session_ended(session);
    }
    engine.flush().map_err(|e| e.to_string())?;
    let _ = engine.shutdown();
    Ok(bytes)
}

fn annal(binary: &Path, dir: &Path, namespace: &str, args: &[&str]) -> Command {
    let mut command = Command::new(binary);
    command
        .args([
            "--store",
            &dir.display().to_string(),
            "--namespace",
            namespace,
        ])
        .args(["--key-store", "keyutils", "--no-daemon"])
        .args(args)
        .stdin(Stdio::null());
    command
}

/// `annal` on the store through its daemon (started on demand).
fn annal_daemon(binary: &Path, dir: &Path, namespace: &str, args: &[&str]) -> Command {
    let mut command = Command::new(binary);
    command
        .args([
            "--store",
            &dir.display().to_string(),
            "--namespace",
            namespace,
        ])
        .args(["--key-store", "keyutils"])
        .args(args)
        .stdin(Stdio::null());
    command
}

fn run() -> Result<(), Failure> {
    annal_engine::keys::establish_session_keyring().map_err(|e| e.to_string())?;
    let binary = annal_binary()?;
    let temp = tempfile::tempdir().map_err(|e| e.to_string())?;
    let keep = std::env::var_os(KEEP_ENV).map(PathBuf::from);
    let dir = keep.clone().unwrap_or_else(|| temp.path().join("store"));
    let name = format!("bench-report-{}", std::process::id());
    let namespace = Namespace::new(&name).map_err(|e| e.to_string())?;
    let started = Instant::now();
    let bytes = fill(&dir, &namespace)?;
    let fill_secs = started.elapsed().as_secs_f64();
    println!("FIGURE report.100mib.fill_seconds {fill_secs:.1} s");
    println!("FIGURE report.100mib.history_bytes {bytes} bytes");
    let out = temp.path().join("report.html");
    let out_text = out.display().to_string();
    let report = ["report", "--out", out_text.as_str()];
    let mut result = timed(|| annal(&binary, &dir, &name, &report), REPORT_RUNS, "").map(|times| {
        let page = std::fs::metadata(&out).map_or(0, |m| m.len());
        println!("FIGURE report.100mib.seconds {:.2} s", median(times));
        println!("FIGURE report.100mib.page_bytes {page} bytes");
    });
    // The same through the store's daemon: the first run also starts it (not counted), and
    // it is stopped after.
    if result.is_ok() {
        let times = timed(
            || annal_daemon(&binary, &dir, &name, &report),
            REPORT_RUNS + 1,
            " (daemon)",
        );
        let _ = annal_daemon(&binary, &dir, &name, &["stop"]).output();
        result = times.map(|mut times| {
            let warm = times.split_off(1);
            println!("FIGURE report.100mib.daemon_seconds {:.2} s", median(warm));
        });
    }
    if keep.is_some() {
        println!(
            "kept: {} --store {} --namespace {name} --key-store keyutils --no-daemon report \
             (in this shell's session keyring: `keyctl session` shells see it; delete --yes ends it)",
            binary.display(),
            dir.display()
        );
    } else {
        let _ = annal(&binary, &dir, &name, &["delete", "--yes"]).output();
    }
    result
}

/// Runs `command()` `runs` times, each to its end: the seconds each took, or the first
/// failure's stderr. Each run's stdout (the report's line) goes to stderr.
fn timed(command: impl Fn() -> Command, runs: usize, what: &str) -> Result<Vec<f64>, Failure> {
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        let output = command().output().map_err(|e| e.to_string())?;
        times.push(started.elapsed().as_secs_f64());
        if !output.status.success() {
            return Err(format!(
                "annal report{what} failed: {}",
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        eprint!("report bench: {}", String::from_utf8_lossy(&output.stdout));
    }
    Ok(times)
}

/// The median of `times` (upper median for an even count; 0 for none).
fn median(mut times: Vec<f64>) -> f64 {
    times.sort_by(f64::total_cmp);
    times.get(times.len() / 2).copied().unwrap_or(0.0)
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("report bench: {e}");
            ExitCode::FAILURE
        }
    }
}
