//! `annal verify`, run as the built binary against a store the engine wrote and against the
//! reference fixture, clean and after deliberate damage; and in its credential-store mode, with
//! the seal checkpoint the real engine keeps in the kernel keyring: an older copy of the whole
//! directory put back is `rolled_back` (and stays so however far a writer seals on), a lost
//! checkpoint is `checkpoint_missing` until the next writer mends it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use annal_actors::{Engine, EngineConfig};
use annal_engine::entropy::{OsEntropy, SeededEntropy};
use annal_engine::keys::{
    CredentialNaming, InMemoryProvider, KeyProvider, KeyutilsProvider, Namespace, StoreState,
    probe_keyutils,
};
use annal_engine::seal::{CheckpointStore, CredentialCheckpoints};
use annal_engine::storage::StoreLayout;
use annal_schema::{Capability, HealthCategory};
use support::{Sandbox, copy_tree};

/// Set to `1` by `.ci/test`: a real credential store that is not usable fails the test instead
/// of skipping it.
const REQUIRE_ENV: &str = "ANNAL_REQUIRE_REAL_KEY_STORES";

/// Captured events after which at least one more chunk has closed and been sealed (a chunk
/// rotates at 4 MiB, about 6 500 of these events).
const EVENTS_PER_SEAL: usize = 7_000;

const ROOT: [u8; 32] = [0x5c; 32];

/// Keeps a spawn from racing an engine restart. Every test here spawns `annal`, and a child
/// forked while another test's in-process engine holds its store's `writer.lock` keeps a copy
/// of that descriptor (and so the `flock`) until it execs. A test that shuts its engine down
/// and starts it again on the same store (the credential-store tests) would then find the
/// store `Locked`. Those tests take this exclusively; the others, whose engine (if any) is
/// started once and never again, share it.
static FORK_GATE: RwLock<()> = RwLock::new(());

/// For a test that restarts an in-process engine: no other test of this binary runs beside it.
fn restarts_engines() -> RwLockWriteGuard<'static, ()> {
    FORK_GATE.write().unwrap_or_else(PoisonError::into_inner)
}

/// For a test that spawns but never restarts an engine: runs beside others like it.
fn spawns_only() -> RwLockReadGuard<'static, ()> {
    FORK_GATE.read().unwrap_or_else(PoisonError::into_inner)
}

fn key_file(dir: &Path, root: &[u8; 32]) -> std::path::PathBuf {
    let path = dir.join("key.hex");
    let hex: String = root.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(&path, hex).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

fn verify(dir: &Path, key: &Path) -> (Option<i32>, serde_json::Value) {
    let out: Output = Command::new(env!("CARGO_BIN_EXE_annal"))
        .arg("verify")
        .arg(dir)
        .arg("--key-hex-file")
        .arg(key)
        .arg("--json")
        .output()
        .unwrap();
    let value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), value)
}

/// A store the engine wrote, with at least one sealed (closed) chunk.
fn engine_store(dir: &Path) -> std::path::PathBuf {
    let ns_dir = dir.join("work");
    let namespace = Namespace::new("work").unwrap();
    let provider = Arc::new(InMemoryProvider::new(Box::new(SeededEntropy::new(1))).unwrap());
    provider
        .put_raw(&namespace, &namespace.primary_reference(), &ROOT)
        .unwrap();
    let engine = Engine::start(
        EngineConfig::new(StoreLayout::in_namespace_dir(&ns_dir), namespace),
        provider as Arc<dyn KeyProvider>,
    )
    .unwrap();
    engine.enable().unwrap();
    let capture = engine.capture();
    for _ in 0..7_000 {
        while engine.queued_events() > 256 {
            std::thread::sleep(Duration::from_micros(200));
        }
        let _ = capture.action_started(Capability::new("input.pointer.click").unwrap(), None, None);
    }
    engine.flush().unwrap();
    engine.shutdown();
    ns_dir
}

fn findings(value: &serde_json::Value) -> Vec<String> {
    value["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["findings"].as_array().unwrap().clone())
        .map(|f| f.as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_store_the_engine_wrote_verifies_clean_and_a_deleted_chunk_is_missing() {
    let _gate = spawns_only();
    let dir = tempfile::tempdir().unwrap();
    let ns_dir = engine_store(dir.path());
    let key = key_file(dir.path(), &ROOT);
    let (code, clean) = verify(&ns_dir, &key);
    assert_eq!(code, Some(0), "{clean}");
    assert_eq!(clean["clean"], true);
    assert!(clean["seals"].as_u64().unwrap() >= 1);
    // Delete the sealed (older) chunk: its seal still names it.
    let sealed = clean["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| !c["sealed"].is_null())
        .unwrap()["file"]
        .as_str()
        .unwrap()
        .to_owned();
    std::fs::remove_file(ns_dir.join("computer-history/chunks").join(&sealed)).unwrap();
    let (code, damaged) = verify(&ns_dir, &key);
    assert_eq!(code, Some(1));
    assert_eq!(damaged["clean"], false);
    assert!(
        findings(&damaged).contains(&"missing".to_owned()),
        "{damaged}"
    );
}

#[test]
fn the_reference_fixture_verifies_clean_without_seals_and_a_wrong_key_does_not() {
    let _gate = spawns_only();
    let dir = tempfile::tempdir().unwrap();
    let store =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/cua-reference/store");
    let mut fixture_root = [0u8; 32];
    for (i, b) in fixture_root.iter_mut().enumerate() {
        *b = i as u8;
    }
    let (code, value) = verify(&store, &key_file(dir.path(), &fixture_root));
    assert_eq!(code, Some(0), "{value}");
    assert_eq!(value["seals"], 0);
    // Offline: no checkpoint was read, and the report says so.
    assert_eq!(value["checkpoint_checked"], false, "{value}");
    let other = tempfile::tempdir().unwrap();
    let (code, value) = verify(&store, &key_file(other.path(), &[7; 32]));
    assert_eq!(code, Some(1), "{value}");
    assert_eq!(value["clean"], false);
}

/// The kernel keyring as the engine's credential store (what `annal` picks in the sandbox's bare
/// environment), or `None`, saying why, when this host has none usable.
fn keyutils(test: &str) -> Option<Arc<dyn KeyProvider>> {
    let report = probe_keyutils();
    if report.state != StoreState::Usable {
        let why = format!(
            "{test}: NOT RUN: the kernel keyring is {} ({})",
            report.state.as_str(),
            report.hint
        );
        assert!(
            std::env::var(REQUIRE_ENV).as_deref() != Ok("1"),
            "{why}, but {REQUIRE_ENV}=1"
        );
        eprintln!("{why}");
        return None;
    }
    Some(Arc::new(
        KeyutilsProvider::open(CredentialNaming::Annal, Box::new(OsEntropy)).unwrap(),
    ))
}

/// The sandbox's store: the directory `annal` uses for its namespace by default.
fn store_dir(sandbox: &Sandbox) -> PathBuf {
    sandbox.path("state").join("annal").join(&sandbox.namespace)
}

/// The real engine on the sandbox's store, enabled.
fn enabled_engine(sandbox: &Sandbox, provider: &Arc<dyn KeyProvider>) -> Engine {
    let namespace = Namespace::new(&sandbox.namespace).unwrap();
    let engine = Engine::start(
        EngineConfig::new(
            StoreLayout::in_namespace_dir(&store_dir(sandbox)),
            namespace,
        ),
        Arc::clone(provider),
    )
    .unwrap();
    engine.enable().unwrap();
    engine
}

/// Runs the real engine on the sandbox's store, captures `events` actions and shuts it down
/// (every seal job, checkpoint included, finished).
fn capture(sandbox: &Sandbox, provider: &Arc<dyn KeyProvider>, events: usize) {
    let engine = enabled_engine(sandbox, provider);
    let capture = engine.capture();
    for _ in 0..events {
        while engine.queued_events() > 256 {
            std::thread::sleep(Duration::from_micros(200));
        }
        let _ = capture.action_started(Capability::new("input.pointer.click").unwrap(), None, None);
    }
    engine.flush().unwrap();
    assert!(engine.shutdown().drained);
}

/// `annal verify --json` in its credential-store mode: exit code and report.
fn verify_store(sandbox: &Sandbox) -> (Option<i32>, serde_json::Value) {
    let out = sandbox.run(&["--key-store", "keyutils", "verify", "--json"]);
    let value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), value)
}

fn seals(report: &serde_json::Value) -> u64 {
    report["seals"].as_u64().unwrap()
}

/// The store's id (its checkpoint is named by it).
fn store_id(sandbox: &Sandbox) -> Option<annal_engine::keys::StoreId> {
    let layout = StoreLayout::in_namespace_dir(&store_dir(sandbox));
    annal_engine::store::read_store_id(layout.sidecar().unwrap()).unwrap()
}

/// The checkpoint's ordinal, as the credential store holds it.
fn checkpoint_ordinal(sandbox: &Sandbox, provider: &Arc<dyn KeyProvider>) -> Option<u64> {
    let namespace = Namespace::new(&sandbox.namespace).unwrap();
    let id = store_id(sandbox);
    CredentialCheckpoints::new(provider.as_ref(), &namespace, id.as_ref())
        .load()
        .unwrap()
        .map(|c| c.ordinal)
}

#[test]
fn the_directory_put_back_as_an_older_copy_is_rolled_back_however_far_a_writer_seals_on() {
    let _gate = restarts_engines();
    let test = "the_directory_put_back_as_an_older_copy_is_rolled_back";
    let Some(provider) = keyutils(test) else {
        return;
    };
    let sandbox = Sandbox::new();
    let dir = store_dir(&sandbox);
    capture(&sandbox, &provider, EVENTS_PER_SEAL);
    let (code, first) = verify_store(&sandbox);
    assert_eq!(code, Some(0), "{first}");
    assert_eq!(first["checkpoint_checked"], true, "{first}");
    assert!(seals(&first) >= 1, "{first}");
    assert_eq!(checkpoint_ordinal(&sandbox, &provider), Some(seals(&first)));
    let old = sandbox.path("old-copy");
    copy_tree(&dir, &old);

    // More is written and sealed: the checkpoint follows, and the store is clean.
    capture(&sandbox, &provider, EVENTS_PER_SEAL);
    let (code, later) = verify_store(&sandbox);
    assert_eq!(code, Some(0), "{later}");
    assert!(seals(&later) > seals(&first), "{later}");
    assert_eq!(checkpoint_ordinal(&sandbox, &provider), Some(seals(&later)));

    // The older copy put back: every chunk is fine on its own, only the checkpoint tells.
    std::fs::remove_dir_all(&dir).unwrap();
    copy_tree(&old, &dir);
    let (code, rolled) = verify_store(&sandbox);
    assert_eq!(code, Some(1), "{rolled}");
    assert_eq!(rolled["clean"], false);
    assert_eq!(rolled["checkpoint_checked"], true);
    assert_eq!(
        rolled["store"],
        serde_json::json!(["rolled_back"]),
        "{rolled}"
    );
    assert!(findings(&rolled).iter().all(|f| f == "ok"), "{rolled}");
    let text = sandbox.run(&["--key-store", "keyutils", "verify"]);
    assert_eq!(text.status.code(), Some(1));
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(text.contains("store rolled_back"), "{text}");
    assert!(
        text.contains("checked against the credential-store checkpoint"),
        "{text}"
    );

    // A writer on the older copy seals on past the checkpoint's ordinal, and never moves the
    // checkpoint: the rollback stays visible.
    let behind = (seals(&later) - seals(&first)) as usize;
    capture(&sandbox, &provider, EVENTS_PER_SEAL * (behind + 1));
    let (code, still) = verify_store(&sandbox);
    assert!(seals(&still) > seals(&later), "{still}");
    assert_eq!(code, Some(1), "{still}");
    assert_eq!(
        still["store"],
        serde_json::json!(["rolled_back"]),
        "{still}"
    );
    assert_eq!(checkpoint_ordinal(&sandbox, &provider), Some(seals(&later)));
    // Status says so too, and no write that succeeds afterwards clears it.
    assert_eq!(
        health_after_writes(&sandbox, &provider),
        HealthCategory::StorageCorrupt
    );
    // The owner accepts this copy as the history: with the checkpoint removed, the next writer
    // finds the chain not older than any checkpoint, mends it, and the alert clears.
    let namespace = Namespace::new(&sandbox.namespace).unwrap();
    provider
        .destroy_checkpoint(&namespace, store_id(&sandbox).as_ref())
        .unwrap();
    assert_eq!(
        health_after_writes(&sandbox, &provider),
        HealthCategory::Ready
    );
    let (code, accepted) = verify_store(&sandbox);
    assert_eq!(code, Some(0), "{accepted}");
}

/// Runs the real engine on the sandbox's store through several group commits (each writer's
/// life compares the checkpoint with the chain at its first tick, and later appends succeed)
/// and returns the health status shows at the end.
fn health_after_writes(sandbox: &Sandbox, provider: &Arc<dyn KeyProvider>) -> HealthCategory {
    const ROUNDS: usize = 5;
    let engine = enabled_engine(sandbox, provider);
    let capture = engine.capture();
    for _ in 0..ROUNDS {
        for _ in 0..10 {
            let _ =
                capture.action_started(Capability::new("input.pointer.click").unwrap(), None, None);
        }
        engine.flush().unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }
    let health = engine.status().unwrap().health;
    assert!(engine.shutdown().drained);
    health
}

#[test]
fn a_lost_checkpoint_is_checkpoint_missing_until_the_next_writer_mends_it() {
    let _gate = restarts_engines();
    let test = "a_lost_checkpoint_is_checkpoint_missing_until_the_next_writer_mends_it";
    let Some(provider) = keyutils(test) else {
        return;
    };
    let sandbox = Sandbox::new();
    capture(&sandbox, &provider, EVENTS_PER_SEAL);
    let (code, clean) = verify_store(&sandbox);
    assert_eq!(code, Some(0), "{clean}");
    let namespace = Namespace::new(&sandbox.namespace).unwrap();
    provider
        .destroy_checkpoint(&namespace, store_id(&sandbox).as_ref())
        .unwrap();
    let (code, missing) = verify_store(&sandbox);
    assert_eq!(code, Some(1), "{missing}");
    assert_eq!(missing["checkpoint_checked"], true);
    assert_eq!(
        missing["store"],
        serde_json::json!(["checkpoint_missing"]),
        "{missing}"
    );
    // The next writer compares the checkpoint with the chain at once and stores the newest
    // seal's, with no seal of its own needed.
    capture(&sandbox, &provider, 10);
    let (code, mended) = verify_store(&sandbox);
    assert_eq!(code, Some(0), "{mended}");
    assert_eq!(
        checkpoint_ordinal(&sandbox, &provider),
        Some(seals(&mended))
    );
}
