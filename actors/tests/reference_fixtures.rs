//! Stores the real reference implementation wrote (trycua/cua, crate cua-driver-core, driven
//! through its public API by a harness; `engine/tests/fixtures/*/README.md` say exactly how),
//! read and written by annal through the Engine API (issue 28, item 6). Each test works on a
//! copy in a temp dir, never on the committed files.
//!
//! - `reference-disabled`, `reference-paused`: an annal store the reference disabled, or
//!   paused: annal says so and admits nothing until the owner enables (resumes) it again
//!   ("narrowing wins", docs/design.md).
//! - `reference-stock-key`: a store the reference created under its stock key naming: annal
//!   reads it with the key under that name (and under no other), and, adopted, writes on under
//!   it. `annal enable` on it without an adoption fails: an ignored test says so.
//! - `reference-appended`: chunks the reference appended to an annal store, two of them the
//!   header-only chunks its `status` leaves: every event reads, verify is clean, no gap, and
//!   annal goes on appending.
//!
//! These replace, where they can, the emulation in `interop.rs` (annal's own codec writing what
//! the reference would) with the reference's own bytes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use annal_actors::{Engine, EngineConfig};
use annal_engine::capture::Admission;
use annal_engine::clock::ManualClock;
use annal_engine::entropy::SeededEntropy;
use annal_engine::journal::{ContractSource, Journal, JournalEvent, State};
use annal_engine::keys::{
    HistoryKeys, InMemoryProvider, JournalKeys, KeyProvider, KeyReference, Namespace, OpenMode,
    ReferenceKind, RootKey, open_store_key,
};
use annal_engine::profile::ChunkVerdict;
use annal_engine::seal::{
    CheckpointReading, CheckpointStore, CredentialCheckpoints, SealKey, StoreFinding, VerifyReport,
};
use annal_engine::storage::{Access, Storage, StoreLayout};
use annal_engine::store::{
    History, StateMirror, StoreReader, StoreReport, adopt_store, key_scope, open_store,
    read_state_mirror,
};
use annal_schema::{Capability, ControlOperation, Event, HealthCategory, Payload};

/// Every engine in these tests reads this wall clock: 2026-12-04T18:00:00Z, after every
/// fixture's events (all written 2026-12-04) and within the default 7-day retention of them,
/// so the tests do not start failing a week after the fixtures were made.
const FIXTURE_CLOCK: Duration = Duration::from_secs(1_796_407_200);

/// `engine/tests/fixtures/<name>`.
fn fixture_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../engine/tests/fixtures")
        .join(name)
}

/// Copies `from` to `to` with the modes a store has (git keeps no modes, nor empty
/// directories: the sidecar's empty `tmp/` and `quarantine/` are made by the caller).
fn copy_tree(from: &Path, to: &Path) {
    annal_engine::test_support::copy_tree(from, to).unwrap();
}

fn unhex(text: &str) -> Vec<u8> {
    let text = text.trim();
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// A fixture copied into a temp dir, with its key in an in-memory credential store under the
/// reference's stock name (`com.trycua.<namespace>.computer-history.v1`).
struct Fixture {
    /// Removed with the copy.
    _dir: tempfile::TempDir,
    /// The fixture's committed folder (read only).
    source: PathBuf,
    layout: StoreLayout,
    namespace: Namespace,
    key: [u8; 32],
    provider: Arc<InMemoryProvider>,
    clock: Arc<ManualClock>,
}

impl Fixture {
    /// `name`'s `store/` copied as the namespace directory `<tmp>/<namespace>` (an annal store:
    /// contract store and sidecar).
    fn annal_store(name: &str, namespace: &str) -> Self {
        let fixture = Self::new(name, namespace);
        let dir = fixture.layout.history_root().parent().unwrap().to_owned();
        copy_tree(&fixture.source.join("store"), &dir);
        for empty in ["tmp", "quarantine"] {
            std::fs::create_dir_all(dir.join("engine").join(empty)).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(
                dir.join("engine").join(empty),
                std::fs::Permissions::from_mode(0o700),
            )
            .unwrap();
        }
        fixture
    }

    /// `name`'s `store/` (a bare contract store) copied as `<tmp>/<namespace>/computer-history`.
    fn contract_store(name: &str, namespace: &str) -> Self {
        let fixture = Self::new(name, namespace);
        copy_tree(&fixture.source.join("store"), fixture.layout.history_root());
        fixture
    }

    fn new(name: &str, namespace: &str) -> Self {
        let source = fixture_dir(name);
        let dir = tempfile::tempdir().unwrap();
        let layout = StoreLayout::in_namespace_dir(&dir.path().join(namespace));
        let namespace = Namespace::new(namespace).unwrap();
        let key: [u8; 32] = unhex(&std::fs::read_to_string(source.join("key.hex")).unwrap())
            .try_into()
            .unwrap();
        let provider = Arc::new(InMemoryProvider::new(Box::new(SeededEntropy::new(28))).unwrap());
        provider
            .put_raw(&namespace, &namespace.primary_reference(), &key)
            .unwrap();
        Self {
            _dir: dir,
            source,
            layout,
            namespace,
            key,
            provider,
            clock: Arc::new(ManualClock::new(FIXTURE_CLOCK)),
        }
    }

    /// Puts the seal checkpoint annal kept when it wrote the fixture's store (a credential,
    /// outside the directory, so not in `store/`) into the credential store.
    fn plant_checkpoint(&self) {
        let value =
            unhex(&std::fs::read_to_string(self.source.join("annal_checkpoint.hex")).unwrap());
        let id = key_scope(&self.layout).unwrap().id;
        self.provider
            .put_raw_checkpoint(&self.namespace, id.as_ref(), &value)
            .unwrap();
    }

    /// What the reference's own reader returned for the fixture's store (its `query`, on a
    /// copy): one event a line, the compact JSON it encrypts.
    fn reference_reader(&self) -> Vec<String> {
        std::fs::read_to_string(self.source.join("reference_reader.jsonl"))
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// `annal inspect <contract store> --key-hex-file <key> --json` (offline, read-only) on the
    /// copy: its report, as printed.
    fn inspect(&self) -> String {
        use std::os::unix::fs::PermissionsExt;
        let key_file = self._dir.path().join("key.hex");
        std::fs::copy(self.source.join("key.hex"), &key_file).unwrap();
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_annal"))
            .arg("inspect")
            .arg(self.layout.history_root())
            .arg("--key-hex-file")
            .arg(&key_file)
            .arg("--json")
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn start(&self) -> Engine {
        Engine::start_with(
            EngineConfig::new(self.layout.clone(), self.namespace.clone()),
            Arc::clone(&self.provider) as Arc<dyn KeyProvider>,
            Arc::clone(&self.clock) as Arc<dyn annal_engine::clock::Clock>,
            None,
        )
        .unwrap()
    }

    fn storage(&self) -> Arc<dyn Storage> {
        Arc::new(open_store(&self.layout, Access::Read).unwrap())
    }

    /// The history stream as annal's reader classifies it, with the fixture's key.
    fn report(&self) -> StoreReport<Event> {
        StoreReader::<History>::new(self.storage())
            .read(&HistoryKeys::from_root(RootKey::from_bytes(self.key)))
            .unwrap()
    }

    fn events(&self) -> Vec<Event> {
        let report = self.report();
        assert!(!report.has_corruption(), "{report:#?}");
        assert!(!report.has_unreadable(), "{report:#?}");
        report.records().map(|r| r.event.clone()).collect()
    }

    fn journal(&self) -> Vec<JournalEvent> {
        let report = StoreReader::<Journal>::new(self.storage())
            .read(&JournalKeys::from_namespace_root(&RootKey::from_bytes(
                self.key,
            )))
            .unwrap();
        assert!(!report.has_corruption(), "{report:#?}");
        report.records().map(|r| r.event.event.clone()).collect()
    }

    /// What `state.json` says.
    fn assert_state_file(&self, enabled: bool, paused: bool) {
        let state = read_state_mirror(&open_store(&self.layout, Access::Read).unwrap()).unwrap();
        assert_eq!(state, Some(StateMirror { enabled, paused }));
    }

    /// The journal's `contract_observed` records.
    fn observed(&self) -> Vec<JournalEvent> {
        self.journal()
            .into_iter()
            .filter(|e| matches!(e, JournalEvent::ContractObserved { .. }))
            .collect()
    }

    /// `annal verify`'s check, with the key the store's chunks name and the checkpoint the
    /// credential store holds for it.
    fn verify(&self) -> VerifyReport {
        let scope = key_scope(&self.layout).unwrap();
        let custody = open_store_key(
            self.provider.as_ref(),
            &self.namespace,
            &scope,
            OpenMode::Read,
        )
        .unwrap();
        let checkpoint =
            CredentialCheckpoints::new(self.provider.as_ref(), &self.namespace, scope.id.as_ref())
                .load()
                .unwrap();
        annal_engine::seal::verify(
            &self.storage(),
            &custody.history_keys(),
            &SealKey::from_custody(&custody),
            CheckpointReading::Read(checkpoint),
        )
        .unwrap()
    }
}

fn click() -> Capability {
    Capability::new("input.pointer.click").unwrap()
}

fn capture_one(engine: &Engine) -> Admission {
    engine
        .capture()
        .action_started(click(), None, None)
        .admission()
}

/// The owner's enable through annal, then `actions` captured (each admitted), flushed, the
/// engine ready throughout and stopped cleanly.
fn enable_and_capture(engine: Engine, actions: usize) {
    let status = engine.enable().unwrap();
    assert!(status.enabled && !status.paused, "{status:?}");
    for _ in 0..actions {
        assert_eq!(capture_one(&engine), Admission::Accepted);
    }
    engine.flush().unwrap();
    assert_eq!(engine.status().unwrap().health, HealthCategory::Ready);
    assert!(engine.shutdown().drained);
}

fn sequences(events: &[Event]) -> Vec<u64> {
    events.iter().map(|e| e.data.sequence.get()).collect()
}

/// `after` holds `before` unchanged, then what was added, every sequence from 1 with no gap:
/// returns what was added.
fn appended<'a>(before: &[Event], after: &'a [Event]) -> &'a [Event] {
    assert_eq!(&after[..before.len()], before, "history is append-only");
    assert_eq!(
        sequences(after),
        (1..=after.len() as u64).collect::<Vec<_>>(),
        "no gap: what was added goes on right above the highest sequence before it"
    );
    &after[before.len()..]
}

fn control_of(event: &Event) -> Option<ControlOperation> {
    match event.data.payload {
        Payload::Control { operation } => Some(operation),
        _ => None,
    }
}

/// The stream ids (`source` minus its URN prefix) of `events`, in order of first appearance.
fn sources(events: &[Event]) -> Vec<String> {
    let mut seen = Vec::new();
    for event in events {
        let source = event.source.stream_id().to_owned();
        if !seen.contains(&source) {
            seen.push(source);
        }
    }
    seen
}

/// Every record of the store is byte-identical to what the reference's reader returned for it,
/// in the same (sequence) order, none missing and none added.
fn assert_byte_identical_to_the_reference_reader(fixture: &Fixture) {
    let report = fixture.report();
    assert!(!report.has_corruption(), "{report:#?}");
    let ours: Vec<String> = report
        .records()
        .map(|r| String::from_utf8(r.plaintext.clone()).unwrap())
        .collect();
    let theirs = fixture.reference_reader();
    assert_eq!(ours.len(), theirs.len());
    for (i, (ours, theirs)) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(ours, theirs, "record {i}");
    }
}

/// `annal inspect` returns every event as the reference's reader did, byte for byte (as raw JSON
/// text inside its report), and every chunk `complete`; returns the chunks' record counts.
fn assert_inspect_returns_what_the_reference_read(fixture: &Fixture) -> Vec<u64> {
    #[derive(serde::Deserialize)]
    struct Shape<'a> {
        #[serde(borrow)]
        events: Vec<&'a serde_json::value::RawValue>,
        chunks: Vec<serde_json::Value>,
    }
    let report = fixture.inspect();
    let shape: Shape<'_> = serde_json::from_str(&report).unwrap();
    let theirs = fixture.reference_reader();
    assert_eq!(shape.events.len(), theirs.len());
    for (i, (ours, theirs)) in shape.events.iter().zip(&theirs).enumerate() {
        assert_eq!(ours.get(), theirs, "event {i}");
    }
    shape
        .chunks
        .iter()
        .map(|c| {
            assert_eq!(c["verdict"], "complete", "{c}");
            c["records"].as_u64().unwrap()
        })
        .collect()
}

/// Every chunk reads complete (header-only ones included) and names the stock key reference.
fn assert_every_chunk_complete_under_the_stock_name(fixture: &Fixture) -> usize {
    let report = fixture.report();
    let mut header_only = 0;
    for chunk in &report.chunks {
        let ChunkVerdict::Complete { records } = &chunk.verdict else {
            panic!("{}: {:?}", chunk.file_name, chunk.verdict);
        };
        let header = chunk.header.as_ref().unwrap();
        assert_eq!(
            fixture
                .namespace
                .kind_of(&KeyReference::new(header.header.key_reference()).unwrap()),
            ReferenceKind::ReferenceNamed,
            "{}",
            chunk.file_name
        );
        if records.is_empty() {
            header_only += 1;
        }
    }
    header_only
}

// --- (a) a store the reference disabled (or paused) after annal wrote to it ------------------

/// The fixture `name`, where annal wrote events 1-9 and the reference then narrowed the store
/// with `operation` (`state.json` first, then its `control` event, sequence 10, in a chunk of
/// its own stream), checked as the reference left it; then annal started on it once, without a
/// word from its owner: it says what the reference said, admits nothing, writes nothing, and
/// journals the reference's event once. Returns the fixture and its events.
fn narrowed_by_the_real_reference(
    name: &str,
    operation: ControlOperation,
) -> (Fixture, Vec<Event>) {
    let (enabled, paused, health) = match operation {
        ControlOperation::Disable => (false, false, HealthCategory::Disabled),
        ControlOperation::Pause => (true, true, HealthCategory::Paused),
        other => panic!("not a narrowing: {other:?}"),
    };
    let f = Fixture::annal_store(name, "work");
    f.plant_checkpoint();

    // As the reference left it: both places of the contract narrowed, the newest event the
    // reference's, in a stream of its own; every event byte-identical to the reference's
    // reader; verify clean (the reference's chunk is the newest of its stream, unsealed, `ok`).
    f.assert_state_file(enabled, paused);
    let before = f.events();
    assert_eq!(sequences(&before), (1..=10).collect::<Vec<_>>());
    let reference_event = before.last().unwrap();
    assert_eq!(control_of(reference_event), Some(operation));
    let streams = sources(&before);
    assert_eq!(streams.len(), 2, "annal's stream and the reference's");
    assert_eq!(reference_event.source.stream_id(), streams[1]);
    assert_byte_identical_to_the_reference_reader(&f);
    assert_eq!(assert_every_chunk_complete_under_the_stock_name(&f), 0);
    let report = f.verify();
    assert!(report.is_clean(), "{report:#?}");

    // annal on it, twice (the second start without the owner's word either): it says so,
    // admits nothing (not counted as dropped), and has no storage fault.
    let says_narrowed = || {
        let engine = f.start();
        let status = engine.status().unwrap();
        assert_eq!(
            (status.enabled, status.paused, status.health),
            (enabled, paused, health),
            "{status:?}"
        );
        for _ in 0..3 {
            assert_eq!(capture_one(&engine), Admission::NotAdmitted);
        }
        assert_eq!(engine.status().unwrap().dropped_events, 0);
        assert!(engine.shutdown().drained);
    };
    says_narrowed();
    // Nothing reached the history; both places still say what the reference said; annal
    // journaled what it observed, and where: the reference's event, by its sequence, once.
    assert_eq!(f.events(), before);
    f.assert_state_file(enabled, paused);
    assert_eq!(
        f.observed(),
        [JournalEvent::ContractObserved {
            operation,
            source: ContractSource::ControlEvent,
            sequence: reference_event.data.sequence.get(),
        }]
    );

    says_narrowed();
    assert_eq!(f.events(), before);
    assert_eq!(f.observed().len(), 1);
    (f, before)
}

/// After the owner widened through annal (`widening` the control event annal wrote): the
/// store holds the fixture's events, then annal's `widening` and a captured action, with no
/// gap; `state.json` says enabled and running; and a restart keeps it so, the reference's
/// event taken once only. Verify is clean.
fn widened_by_the_owner(f: &Fixture, before: &[Event], widening: ControlOperation) {
    f.assert_state_file(true, false);
    let after = f.events();
    let added = appended(before, &after);
    assert_eq!(control_of(&added[0]), Some(widening));
    assert!(
        added
            .iter()
            .any(|e| matches!(e.data.payload, Payload::ActionStarted)),
        "{added:#?}"
    );
    let engine = f.start();
    let status = engine.status().unwrap();
    assert!(status.enabled && !status.paused, "{status:?}");
    assert_eq!(capture_one(&engine), Admission::Accepted);
    assert!(engine.shutdown().drained);
    assert_eq!(f.observed().len(), 1);
    let report = f.verify();
    assert!(report.is_clean(), "{report:#?}");
}

#[test]
fn a_store_the_real_reference_disabled_says_disabled_and_admits_nothing_until_enabled() {
    let (f, before) =
        narrowed_by_the_real_reference("reference-disabled", ControlOperation::Disable);
    enable_and_capture(f.start(), 1);
    widened_by_the_owner(&f, &before, ControlOperation::Enable);
}

#[test]
fn a_store_the_real_reference_paused_says_paused_and_admits_nothing_until_resumed() {
    let (f, before) = narrowed_by_the_real_reference("reference-paused", ControlOperation::Pause);
    let engine = f.start();
    let status = engine.resume().unwrap();
    assert!(status.enabled && !status.paused, "{status:?}");
    assert_eq!(capture_one(&engine), Admission::Accepted);
    engine.flush().unwrap();
    assert_eq!(engine.status().unwrap().health, HealthCategory::Ready);
    assert!(engine.shutdown().drained);
    widened_by_the_owner(&f, &before, ControlOperation::Resume);
}

// --- (c) chunks the reference appended to an annal store --------------------------------------

#[test]
fn chunks_the_real_reference_appended_read_whole_verify_clean_and_annal_appends_on() {
    let f = Fixture::annal_store("reference-appended", "work");

    // Every event, annal's and the reference's, byte-identical to what the reference read.
    let before = f.events();
    // annal's nine (enable, a session of three actions) and the reference's nine (a session of
    // three actions, its flush).
    assert_eq!(before.len(), 18);
    assert_byte_identical_to_the_reference_reader(&f);
    // The owner's offline tool says the same: annal's chunk, the appending run's, and the two
    // header-only chunks, each complete.
    let mut records = assert_inspect_returns_what_the_reference_read(&f);
    records.sort_unstable();
    assert_eq!(records, [0, 0, 9, 9]);
    // Two header-only chunks (the reference's `status`, before and after its appending run),
    // every chunk complete and under the stock key name.
    assert_eq!(assert_every_chunk_complete_under_the_stock_name(&f), 2);
    let report = f.report();
    assert_eq!(report.chunks.len(), 4);
    // Three streams hold records or headers of their own: annal's, and one per reference
    // process (the two `status` runs and the appending run: four chunks, four streams).
    let streams: BTreeSet<&str> = report
        .chunks
        .iter()
        .map(|c| c.header.as_ref().unwrap().header.stream_id())
        .collect();
    assert_eq!(streams.len(), 4);
    // No gap: the reference went on at annal's highest sequence plus one.
    assert_eq!(sequences(&before), (1..=18).collect::<Vec<_>>());
    let event_streams = sources(&before);
    assert_eq!(event_streams.len(), 2);
    assert!(
        before[..9]
            .iter()
            .all(|e| e.source.stream_id() == event_streams[0])
    );
    assert!(
        before[9..]
            .iter()
            .all(|e| e.source.stream_id() == event_streams[1])
    );
    assert_eq!(control_of(&before[8]), None);
    assert_eq!(control_of(&before[17]), Some(ControlOperation::Flush));

    // Verify, with no checkpoint in this credential store: exactly `checkpoint_missing` (annal's
    // seal is there, its checkpoint is not) and every chunk ok.
    let report = f.verify();
    assert!(report.chunks.iter().all(|c| c.is_ok()), "{report:#?}");
    assert!(
        matches!(
            report.store.as_slice(),
            [StoreFinding::CheckpointMissing { newest }] if newest.ordinal == 1
        ),
        "{report:#?}"
    );
    assert_eq!(report.seals, 1);
    // With the checkpoint annal kept when it wrote the store: clean.
    f.plant_checkpoint();
    let report = f.verify();
    assert!(report.is_clean(), "{report:#?}");

    // annal opens it: enabled (the reference changed nothing about on and off), healthy, and
    // appends on.
    let engine = f.start();
    let status = engine.status().unwrap();
    assert!(status.enabled && !status.paused, "{status:?}");
    assert_eq!(status.health, HealthCategory::Ready);
    for _ in 0..3 {
        assert_eq!(capture_one(&engine), Admission::Accepted);
    }
    engine.flush().unwrap();
    let status = engine.status().unwrap();
    assert_eq!(status.health, HealthCategory::Ready);
    assert_eq!(status.dropped_events, 0);
    assert!(engine.shutdown().drained);

    let after = f.events();
    let added = appended(&before, &after);
    // The three actions, then the flush's control event (the contract's, as the reference's
    // own flush in this store wrote one).
    assert_eq!(added.len(), 4, "{added:#?}");
    assert!(
        matches!(
            added[3].data.payload,
            Payload::Control {
                operation: ControlOperation::Flush
            }
        ),
        "{added:#?}"
    );
    // And no gap to account for: nothing skipped, nothing lost, nothing observed.
    let journal = f.journal();
    let state = State::replay(&journal);
    assert!(state.skipped.is_empty(), "{:?}", state.skipped);
    assert!(state.lost.is_empty(), "{:?}", state.lost);
    assert_eq!(f.observed(), [], "a flush says nothing about on and off");
    let report = f.verify();
    assert!(report.is_clean(), "{report:#?}");
}

// --- (b) a store the reference created under its stock key naming ---------------------------

/// Every file under `root`, with its bytes.
fn snapshot(root: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                stack.push(entry.path());
            } else {
                out.insert(entry.path(), std::fs::read(entry.path()).unwrap());
            }
        }
    }
    out
}

#[test]
fn a_store_the_real_reference_created_with_its_stock_key_naming_reads_and_writes_under_it() {
    let f = Fixture::contract_store("reference-stock-key", "stock");
    let stock = KeyReference::new("com.trycua.stock.computer-history.v1").unwrap();
    assert_eq!(f.namespace.primary_reference(), stock);
    let bare = StoreLayout::contract_store_only(f.layout.history_root());

    // Read as the reference left it (no sidecar): its chunk names the stock key, and with the
    // key under that name every event reads, byte-identical to what the reference read.
    let scope = key_scope(&bare).unwrap();
    assert_eq!(scope.id, None);
    assert_eq!(scope.named, [stock.clone()].into());
    let custody =
        open_store_key(f.provider.as_ref(), &f.namespace, &scope, OpenMode::Read).unwrap();
    assert_eq!(custody.reference(), &stock);
    let read = |layout: &StoreLayout| {
        StoreReader::<History>::new(Arc::new(open_store(layout, Access::Read).unwrap()))
            .read(&custody.history_keys())
            .unwrap()
    };
    let report = read(&bare);
    assert!(!report.has_corruption(), "{report:#?}");
    let theirs = f.reference_reader();
    let ours: Vec<String> = report
        .records()
        .map(|r| String::from_utf8(r.plaintext.clone()).unwrap())
        .collect();
    assert_eq!(ours, theirs);
    let before: Vec<Event> = report.records().map(|r| r.event.clone()).collect();
    assert_eq!(
        sequences(&before),
        (1..=before.len() as u64).collect::<Vec<_>>()
    );
    assert_eq!(assert_every_chunk_complete_under_the_stock_name(&f), 0);
    assert_eq!(
        assert_inspect_returns_what_the_reference_read(&f),
        [before.len() as u64]
    );

    // The same bytes under any other name do not open it: the chunks decide, and a key they
    // name is never created.
    let elsewhere = InMemoryProvider::new(Box::new(SeededEntropy::new(29))).unwrap();
    elsewhere
        .put_raw(&f.namespace, &f.namespace.legacy_reference(), &f.key)
        .unwrap();
    let refused = open_store_key(&elsewhere, &f.namespace, &scope, OpenMode::Read).unwrap_err();
    assert_eq!(
        refused.category(),
        HealthCategory::KeyUnavailable,
        "{refused}"
    );
    assert_eq!(
        elsewhere.references(&f.namespace).unwrap(),
        [f.namespace.legacy_reference()]
    );

    // annal adopts it (a sidecar beside it; the contract store untouched) and writes on, under
    // the stock name: the reference's key is the store's key, and no other is made.
    let contract_before = snapshot(f.layout.history_root());
    adopt_store(&f.layout).unwrap();
    assert_eq!(snapshot(f.layout.history_root()), contract_before);
    // Started on it before its owner said anything, annal says disabled, as it does for any
    // store its owner has not enabled through annal: the reference's `enable` (its newest
    // lifecycle event) is never taken ("narrowing wins", docs/design.md), and annal writes its
    // answer back to both places of the contract, so the reference reads disabled too.
    let engine = f.start();
    let status = engine.status().unwrap();
    assert!(!status.enabled, "{status:?}");
    assert_eq!(status.health, HealthCategory::Disabled);
    assert_eq!(capture_one(&engine), Admission::NotAdmitted);
    assert!(engine.shutdown().drained);
    f.assert_state_file(false, false);
    let written_back = f.events();
    let added = appended(&before, &written_back);
    assert_eq!(added.len(), 1, "{added:#?}");
    assert_eq!(control_of(&added[0]), Some(ControlOperation::Disable));
    assert_eq!(
        f.observed(),
        [JournalEvent::ContractObserved {
            operation: ControlOperation::Enable,
            source: ContractSource::ControlEvent,
            sequence: 1,
        }],
        "the reference's enable read once, not taken"
    );
    let before = written_back;

    // The owner enables it through annal: it writes on, under the stock name.
    let engine = f.start();
    enable_and_capture(engine, 3);

    let scope = key_scope(&f.layout).unwrap();
    assert!(scope.id.is_some());
    assert_eq!(
        scope.named,
        [stock.clone()].into(),
        "annal's chunks name it too"
    );
    assert_eq!(scope.journal, [stock.clone()].into());
    assert_eq!(f.provider.references(&f.namespace).unwrap(), [stock]);
    assert_eq!(
        f.provider.load_reference_owner(&f.namespace).unwrap(),
        scope.id,
        "annal claimed the unowned stock key for this store"
    );
    let after = f.events();
    let added = appended(&before, &after);
    assert!(!added.is_empty());
    assert!(
        added
            .iter()
            .all(|e| e.source.stream_id() != before[0].source.stream_id())
    );
    let report = f.verify();
    assert!(report.is_clean(), "{report:#?}");
}

/// The owner's `annal enable` (the daemon's `Engine::enable`) on a store the stock reference
/// created, where annal expects it (`<namespace dir>/computer-history`), with no sidecar yet.
#[test]
fn enable_takes_over_a_store_the_real_reference_created() {
    let f = Fixture::contract_store("reference-stock-key", "stock");
    let contract_before = snapshot(f.layout.history_root());
    let engine = f.start();
    enable_and_capture(engine, 1);
    assert!(f.layout.sidecar().unwrap().is_dir());
    // The reference's files are still there, byte for byte (annal only adds chunks and rewrites
    // `state.json`).
    let after = snapshot(f.layout.history_root());
    for (path, bytes) in &contract_before {
        if !path.ends_with("state.json") {
            assert_eq!(after.get(path), Some(bytes), "{}", path.display());
        }
    }
    let events = f.events();
    assert_eq!(
        sequences(&events),
        (1..=events.len() as u64).collect::<Vec<_>>()
    );
    assert_eq!(
        key_scope(&f.layout).unwrap().named,
        [f.namespace.primary_reference()].into()
    );
}

/// annal started on a store the stock reference created, before any `enable`: history is off
/// (annal never enabled it), and `bytes_used` counts the reference's chunks as the reference's
/// own status does, never 0 because annal has no sidecar there yet.
#[test]
fn a_store_the_real_reference_created_reports_its_chunks_before_annal_adopts_it() {
    let f = Fixture::contract_store("reference-stock-key", "stock");
    let chunks: u64 = std::fs::read_dir(f.layout.history_root().join("chunks"))
        .unwrap()
        .map(|entry| entry.unwrap().metadata().unwrap())
        .filter(|meta| meta.is_file())
        .map(|meta| meta.len())
        .sum();
    assert!(chunks > 0);
    let engine = f.start();
    let status = engine.status().unwrap();
    engine.shutdown();
    assert_eq!(status.bytes_used, chunks, "{status:?}");
    // Nothing of annal's was added by looking.
    assert!(f.layout.sidecar().is_none_or(|sidecar| !sidecar.exists()));
}
