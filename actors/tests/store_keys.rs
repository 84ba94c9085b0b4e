//! One key per store: two stores of one namespace under one user (`--store A`, `--store B`)
//! through the real engine, each capturing, sealing and verifying clean with its own key and
//! checkpoint; the second is refused the first one's key at enable until told to take its own;
//! deleting one leaves the other readable. Run against the in-memory credential store, and
//! against the user's real kernel keyring when it is usable (the keyring is per uid, not per
//! HOME: two stores there are what two HOMEs of one uid share). docs/key-custody.md, "One key
//! per store".
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use annal_actors::{ControlError, Engine, EngineConfig, EngineError};
use annal_engine::entropy::{Entropy, OsEntropy, SeededEntropy};
use annal_engine::keys::{
    CredentialNaming, InMemoryProvider, KeyChoice, KeyProvider, KeyutilsProvider, Namespace,
    OpenMode, StoreState, destroy_store_keys, open_store_key, probe_keyutils,
};
use annal_engine::seal::{CheckpointReading, CheckpointStore, CredentialCheckpoints, SealKey};
use annal_engine::storage::{Access, Storage, StoreLayout};
use annal_engine::store::{delete_store_files, key_scope, open_store, plan_store_delete};
use annal_schema::{Capability, HealthCategory};

/// Enough actions to close a chunk, so each store has a seal and a checkpoint.
const EVENTS_PER_SEAL: usize = 7_000;

/// With this set to `1`, a test that cannot reach the kernel keyring fails instead of skipping.
const REQUIRE_ENV: &str = "ANNAL_REQUIRE_REAL_KEY_STORES";

fn start(layout: &StoreLayout, namespace: &Namespace, provider: &Arc<dyn KeyProvider>) -> Engine {
    start_with(layout, namespace, provider, KeyChoice::Reference)
}

fn start_with(
    layout: &StoreLayout,
    namespace: &Namespace,
    provider: &Arc<dyn KeyProvider>,
    choice: KeyChoice,
) -> Engine {
    let mut config = EngineConfig::new(layout.clone(), namespace.clone());
    config.key_choice = choice;
    Engine::start(config, Arc::clone(provider)).unwrap()
}

/// Captures `events` actions on an enabled engine, flushes, and checks its health on the way.
fn capture(engine: &Engine, events: usize) {
    let capture = engine.capture();
    for _ in 0..events {
        while engine.queued_events() > 256 {
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        let _ = capture.action_started(Capability::new("input.pointer.click").unwrap(), None, None);
    }
    engine.flush().unwrap();
}

/// Verifies the store at `layout` with the key its chunks name and its own checkpoint, as
/// `annal verify` does; returns how many seals it holds.
fn verify_clean(layout: &StoreLayout, namespace: &Namespace, provider: &dyn KeyProvider) -> u64 {
    let scope = key_scope(layout).unwrap();
    let custody = open_store_key(provider, namespace, &scope, OpenMode::Read).unwrap();
    let checkpoint = CredentialCheckpoints::new(provider, namespace, scope.id.as_ref())
        .load()
        .unwrap();
    let storage: Arc<dyn Storage> = Arc::new(open_store(layout, Access::Read).unwrap());
    let report = annal_engine::seal::verify(
        &storage,
        &custody.history_keys(),
        &SealKey::from_custody(&custody),
        CheckpointReading::Read(checkpoint),
    )
    .unwrap();
    assert!(report.is_clean(), "{report:#?}");
    assert!(report.seals >= 1, "a chunk was sealed");
    assert_eq!(checkpoint.map(|c| c.ordinal), Some(report.seals));
    report.seals
}

/// Destroys, when dropped (a failed test included), what the stores at its layouts left in the
/// credential store: their keys and checkpoints, and every key of their namespace.
struct Cleanup(Arc<dyn KeyProvider>, Namespace, Vec<StoreLayout>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for layout in &self.2 {
            if let Ok(scope) = key_scope(layout) {
                let _ = destroy_store_keys(self.0.as_ref(), &self.1, &scope);
            }
        }
        let _ = annal_engine::keys::destroy_namespace(self.0.as_ref(), &self.1);
    }
}

fn two_stores_of_one_namespace_live_side_by_side(provider: Arc<dyn KeyProvider>, ns: &str) {
    let dir = tempfile::tempdir().unwrap();
    let namespace = Namespace::new(ns).unwrap();
    let a = StoreLayout::in_namespace_dir(&dir.path().join("A"));
    let b = StoreLayout::in_namespace_dir(&dir.path().join("B"));
    let _cleanup = Cleanup(
        Arc::clone(&provider),
        namespace.clone(),
        vec![a.clone(), b.clone()],
    );

    // A takes the namespace's key: the reference implementation's name.
    let engine_a = start(&a, &namespace, &provider);
    engine_a.enable().unwrap();
    capture(&engine_a, EVENTS_PER_SEAL);

    // B, same namespace, same user: refused A's key at enable, and nothing of A's changes.
    let engine_b = start(&b, &namespace, &provider);
    let refused = engine_b.enable().unwrap_err();
    assert_eq!(
        refused,
        EngineError::Control(ControlError::Key(HealthCategory::KeyUnavailable)),
        "{refused}"
    );
    assert!(!engine_b.status().unwrap().enabled);
    assert!(engine_b.shutdown().drained);
    // Told which to do: a key of its own.
    let engine_b = start_with(&b, &namespace, &provider, KeyChoice::Own);
    engine_b.enable().unwrap();
    capture(&engine_b, EVENTS_PER_SEAL);

    // Both capture on, side by side, and stay healthy.
    capture(&engine_a, 10);
    capture(&engine_b, 10);
    for engine in [&engine_a, &engine_b] {
        assert_eq!(engine.status().unwrap().health, HealthCategory::Ready);
    }
    assert!(engine_a.shutdown().drained);
    assert!(engine_b.shutdown().drained);

    // Each verifies clean with its own key and checkpoint (no rolled_back, no corruption).
    let scope_a = key_scope(&a).unwrap();
    let scope_b = key_scope(&b).unwrap();
    assert_ne!(scope_a.id, scope_b.id);
    assert_eq!(scope_a.named, [namespace.primary_reference()].into());
    assert_eq!(
        scope_b.named,
        [namespace.store_reference(&scope_b.id.unwrap())].into()
    );
    let seals_a = verify_clean(&a, &namespace, provider.as_ref());
    verify_clean(&b, &namespace, provider.as_ref());

    // Restarted (the default choice), each takes its own key again.
    for layout in [&a, &b] {
        let engine = start(layout, &namespace, &provider);
        engine.enable().unwrap();
        capture(&engine, 10);
        assert_eq!(engine.status().unwrap().health, HealthCategory::Ready);
        assert!(engine.shutdown().drained);
    }

    // Delete B (as `annal delete` does): A's key, checkpoint and history are untouched.
    let plan = plan_store_delete(open_store(&b, Access::Write).unwrap(), &namespace).unwrap();
    let proof = destroy_store_keys(provider.as_ref(), &namespace, &plan.key_scope()).unwrap();
    assert!(!proof.destroyed().contains(&namespace.primary_reference()));
    delete_store_files(plan, &proof).unwrap();
    assert!(!b.history_root().exists());
    assert!(verify_clean(&a, &namespace, provider.as_ref()) >= seals_a);
    let engine = start(&a, &namespace, &provider);
    engine.enable().unwrap();
    capture(&engine, 10);
    assert_eq!(engine.status().unwrap().health, HealthCategory::Ready);
    assert!(engine.shutdown().drained);

    // Then A: nothing of the namespace is left in the credential store.
    let plan = plan_store_delete(open_store(&a, Access::Write).unwrap(), &namespace).unwrap();
    let scope = plan.key_scope();
    let proof = destroy_store_keys(provider.as_ref(), &namespace, &scope).unwrap();
    delete_store_files(plan, &proof).unwrap();
    assert!(provider.references(&namespace).unwrap().is_empty());
    assert_eq!(provider.load_reference_owner(&namespace).unwrap(), None);
    assert_eq!(
        provider
            .load_checkpoint(&namespace, scope.id.as_ref())
            .unwrap(),
        None
    );
}

#[test]
fn two_stores_of_one_namespace_in_memory() {
    let provider: Arc<dyn KeyProvider> =
        Arc::new(InMemoryProvider::new(Box::new(SeededEntropy::new(11))).unwrap());
    two_stores_of_one_namespace_live_side_by_side(provider, "work");
}

#[test]
fn two_stores_of_one_namespace_in_the_users_kernel_keyring() {
    let report = probe_keyutils();
    if report.state != StoreState::Usable {
        let why = format!(
            "two_stores_of_one_namespace_in_the_users_kernel_keyring: NOT RUN: the kernel \
             keyring is {} ({})",
            report.state.as_str(),
            report.hint
        );
        assert!(
            std::env::var(REQUIRE_ENV).as_deref() != Ok("1"),
            "{why}, but {REQUIRE_ENV}=1"
        );
        eprintln!("{why}");
        return;
    }
    let provider: Arc<dyn KeyProvider> =
        Arc::new(KeyutilsProvider::open(CredentialNaming::Annal, Box::new(OsEntropy)).unwrap());
    let mut random = [0u8; 4];
    OsEntropy.fill(&mut random).unwrap();
    let ns = format!(
        "annal-two-stores-{}",
        random
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    two_stores_of_one_namespace_live_side_by_side(provider, &ns);
}

/// The root key of `fixtures/legacy-store` (fixtures/README.md).
const LEGACY_ROOT: [u8; 32] = [0x5c; 32];

/// Copies `from` to `to` with the modes a store has (git keeps none, nor empty directories).
fn copy_store(from: &std::path::Path, to: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(to).unwrap();
    std::fs::set_permissions(to, std::fs::Permissions::from_mode(0o700)).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_store(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
    }
}

#[test]
fn a_store_written_before_the_reference_naming_keeps_its_key_and_verifies_clean() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("work");
    copy_store(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/legacy-store"),
        &store,
    );
    for empty in ["tmp", "quarantine"] {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(store.join("engine").join(empty))
            .unwrap();
    }
    let layout = StoreLayout::in_namespace_dir(&store);
    let namespace = Namespace::new("work").unwrap();
    let memory = InMemoryProvider::new(Box::new(SeededEntropy::new(12))).unwrap();
    memory
        .put_raw(&namespace, &namespace.legacy_reference(), &LEGACY_ROOT)
        .unwrap();
    let provider: Arc<dyn KeyProvider> = Arc::new(memory);
    let before = key_scope(&layout).unwrap();
    assert_eq!(before.id, None, "written before store ids");
    assert_eq!(before.named, [namespace.legacy_reference()].into());

    // It reads as it is.
    let custody = open_store_key(provider.as_ref(), &namespace, &before, OpenMode::Read).unwrap();
    assert_eq!(custody.reference(), &namespace.legacy_reference());

    // Enabled again and written to: it keeps its key (new chunks name it too), gets an id, and
    // no reference-named key is made for it.
    let engine = start(&layout, &namespace, &provider);
    engine.enable().unwrap();
    capture(&engine, EVENTS_PER_SEAL);
    assert_eq!(engine.status().unwrap().health, HealthCategory::Ready);
    assert!(engine.shutdown().drained);
    let after = key_scope(&layout).unwrap();
    assert!(after.id.is_some());
    assert_eq!(after.named, [namespace.legacy_reference()].into());
    assert!(
        provider
            .load(&namespace, &namespace.primary_reference())
            .is_err()
    );
    assert_eq!(provider.load_reference_owner(&namespace).unwrap(), None);
    assert!(verify_clean(&layout, &namespace, provider.as_ref()) >= 2);

    // A new store of the namespace beside it takes the reference-named key: no sharing.
    let fresh = StoreLayout::in_namespace_dir(&dir.path().join("fresh"));
    let engine = start(&fresh, &namespace, &provider);
    engine.enable().unwrap();
    capture(&engine, EVENTS_PER_SEAL);
    assert!(engine.shutdown().drained);
    verify_clean(&fresh, &namespace, provider.as_ref());
    verify_clean(&layout, &namespace, provider.as_ref());
}

#[test]
fn a_store_whose_chunks_name_two_keys_reads_each_chunk_with_the_key_its_header_names() {
    use annal_engine::keys::{HistoryKeys, KeyCustody, RootKey};
    use annal_engine::store::{History, StoreReader, StoreWriter, WriterConfig};
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("work");
    copy_store(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/legacy-store"),
        &store,
    );
    for empty in ["tmp", "quarantine"] {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(store.join("engine").join(empty))
            .unwrap();
    }
    let layout = StoreLayout::in_namespace_dir(&store);
    let namespace = Namespace::new("work").unwrap();
    let memory = InMemoryProvider::new(Box::new(SeededEntropy::new(13))).unwrap();
    memory
        .put_raw(&namespace, &namespace.legacy_reference(), &LEGACY_ROOT)
        .unwrap();
    // What a stock reference leaves when it appends to an annal store: a key of its own naming
    // (no owner record), and chunks whose headers name it.
    const REFERENCE_ROOT: [u8; 32] = [0x77; 32];
    memory
        .put_raw(&namespace, &namespace.primary_reference(), &REFERENCE_ROOT)
        .unwrap();
    let provider: Arc<dyn KeyProvider> = Arc::new(memory);
    let before = {
        let storage: Arc<dyn Storage> = Arc::new(open_store(&layout, Access::Read).unwrap());
        let report = StoreReader::<History>::new(storage)
            .read(&HistoryKeys::from_root(RootKey::from_bytes(LEGACY_ROOT)))
            .unwrap();
        assert!(!report.has_corruption(), "{report:#?}");
        report
            .records()
            .map(|r| r.event.clone())
            .collect::<Vec<_>>()
    };
    {
        let appender = KeyCustody::load(
            provider.as_ref(),
            &namespace,
            &namespace.primary_reference(),
        )
        .unwrap()
        .with_other_keys(vec![
            provider
                .load(&namespace, &namespace.legacy_reference())
                .unwrap(),
        ]);
        let storage: Arc<dyn Storage> = Arc::new(open_store(&layout, Access::Write).unwrap());
        let mut writer = StoreWriter::<History>::open(
            storage,
            appender.history_keys(),
            WriterConfig::new(namespace.primary_reference(), std::num::NonZeroU64::MIN),
            Arc::new(annal_engine::clock::SystemClock),
        )
        .unwrap();
        writer
            .append(before.iter().take(3).map(|e| e.to_draft()).collect())
            .unwrap();
        writer.sync().unwrap();
        writer.close().unwrap();
    }
    let scope = key_scope(&layout).unwrap();
    assert_eq!(
        scope.named,
        [namespace.legacy_reference(), namespace.primary_reference()].into()
    );
    assert_eq!(scope.journal, [namespace.legacy_reference()].into());

    // annal keeps writing with the key its journal names, and reads both chunks.
    let custody = open_store_key(provider.as_ref(), &namespace, &scope, OpenMode::Read).unwrap();
    assert_eq!(custody.reference(), &namespace.legacy_reference());
    let storage: Arc<dyn Storage> = Arc::new(open_store(&layout, Access::Read).unwrap());
    let report = StoreReader::<History>::new(storage)
        .read(&custody.history_keys())
        .unwrap();
    assert!(!report.has_corruption(), "{report:#?}");
    assert_eq!(report.records().count(), before.len() + 3);
    // Without the other key, the appended chunk does not open: the header decides.
    let storage: Arc<dyn Storage> = Arc::new(open_store(&layout, Access::Read).unwrap());
    let legacy_only = StoreReader::<History>::new(storage)
        .read(&HistoryKeys::from_root(RootKey::from_bytes(LEGACY_ROOT)))
        .unwrap();
    assert_eq!(legacy_only.records().count(), before.len());

    // And the engine goes on capturing on it, healthy.
    let engine = start(&layout, &namespace, &provider);
    engine.enable().unwrap();
    capture(&engine, 10);
    assert_eq!(engine.status().unwrap().health, HealthCategory::Ready);
    assert!(engine.shutdown().drained);
    assert_eq!(
        key_scope(&layout).unwrap().journal,
        [namespace.legacy_reference()].into()
    );
}
