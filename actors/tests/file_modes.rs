//! Every file annal writes is created 0600, and every directory 0700, at creation: under a 022
//! umask (set in this process, inherited by every `annal` it starts) a realistic workload runs
//! through the binary (a daemon that captures enough to rotate and seal a chunk, owner reads,
//! an offline index rebuild and quarantine, a daemon started on demand), and then every entry
//! annal made under the sandbox's state and runtime directories is checked. A file created with
//! the default mode and narrowed afterwards would show here as 0644 (or exist so for a moment).
//!
//! One test in its own binary: the umask is process-wide, and this binary runs no other test
//! (so nothing else forks while it spawns, and nothing else creates files under its umask).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;
use support::Sandbox;

/// Actions captured between two looks at the chunk count, each started and completed (two
/// events). A chunk rotates at 4 MiB, some 8 000 to 9 000 of these events; actions the daemon
/// drops under load (a full capture queue) are simply captured again in the next batch.
const ACTIONS_PER_BATCH: usize = 2_000;

/// How long the workload may take to make the daemon close (and seal) a chunk.
const ROTATION_DEADLINE_SECS: u64 = 180;

/// How long the foreground daemon may take to exit after `annal stop`.
const DAEMON_EXIT_DEADLINE_SECS: u64 = 30;

/// The chunk files of the store, by name.
fn chunk_names(store: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(store.join("computer-history").join("chunks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// Every entry below `dir` (not followed through symlinks), with its metadata.
fn entries(dir: &Path) -> Vec<(PathBuf, std::fs::Metadata)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.is_dir() {
            out.extend(entries(&path));
        }
        out.push((path, meta));
    }
    out
}

#[test]
fn every_file_annal_writes_is_0600_and_every_directory_0700_under_a_022_umask() {
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o022));
    let sandbox = Sandbox::new();
    let mut daemon = sandbox
        .annal(&["serve"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut raw = sandbox.connect_when_up();
    assert!(raw.ask(json!({"op": "enable"}))["ok"].is_object());
    let session = raw.ask(json!({"op": "session_started", "session": "modes"}));
    assert!(session["ok"].is_object(), "{session}");
    let store = sandbox.path("state").join("annal").join(&sandbox.namespace);
    let deadline = Instant::now() + Duration::from_secs(ROTATION_DEADLINE_SECS);
    while chunk_names(&store).len() < 2 {
        assert!(Instant::now() < deadline, "no chunk was closed in time");
        for _ in 0..ACTIONS_PER_BATCH {
            raw.action(json!({"capability": "input.pointer.click"}));
        }
        assert!(raw.ask(json!({"op": "flush"}))["ok"].is_object());
    }
    drop(raw);
    sandbox.json(&["query", "--limit", "5"]);
    sandbox.ok(&["stop"]);
    let deadline = Instant::now() + Duration::from_secs(DAEMON_EXIT_DEADLINE_SECS);
    while daemon.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the daemon did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Offline: the index rebuilt (written in tmp/, renamed in), the oldest chunk quarantined.
    sandbox.ok(&["index", "rebuild"]);
    let chunks = chunk_names(&store);
    sandbox.ok(&["repair", "--quarantine", &chunks[0]]);
    // A daemon started on demand (its log and lock beside the socket), stopped again.
    sandbox.ok(&["status"]);
    sandbox.ok(&["stop"]);

    let mut seen = Vec::new();
    let mut wrong = Vec::new();
    for top in [
        sandbox.path("state").join("annal"),
        sandbox.path("run").join("annal"),
    ] {
        let top_meta = std::fs::symlink_metadata(&top).unwrap();
        for (path, meta) in entries(&top).into_iter().chain([(top.clone(), top_meta)]) {
            let mode = meta.mode() & 0o7777;
            let kind = meta.file_type();
            let expected = if kind.is_dir() {
                0o700
            } else if kind.is_file() || kind.is_socket() {
                0o600
            } else {
                wrong.push(format!(
                    "{}: neither file, directory nor socket",
                    path.display()
                ));
                continue;
            };
            if mode != expected {
                wrong.push(format!(
                    "{}: {mode:o}, expected {expected:o}",
                    path.display()
                ));
            }
            seen.push(path);
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    // The workload wrote what it should have: the check above covered each kind of file.
    let has = |suffix: &str| seen.iter().any(|p| p.to_string_lossy().ends_with(suffix));
    for expected in [
        "key-store",
        ".cua-history-root-v1",
        "state.json",
        "writer.lock",
        ".cborseq",
        ".seal",
        ".idx",
    ] {
        assert!(has(expected), "no {expected} among {seen:#?}");
    }
    let under = |dir: &str| {
        seen.iter()
            .any(|p| p.parent().is_some_and(|d| d.ends_with(dir)))
    };
    for dir in [
        "engine/journal",
        "engine/quarantine",
        "engine/seals",
        "engine/index",
    ] {
        assert!(under(dir), "nothing in {dir} among {seen:#?}");
    }
}
