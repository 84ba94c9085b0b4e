//! Shared helpers for the engine's integration tests: the reference fixture.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;

use annal_engine::keys::RootKey;
use annal_engine::profile::{ChunkHeader, ChunkId};

/// The fixture directory; panics (never skips) when `../shared` is missing.
pub fn fixture_dir() -> PathBuf {
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/fixtures/cua-reference"
    ));
    assert!(
        dir.join("records.json").is_file(),
        "the reference fixture is missing: `../shared` must sit beside the repository ({})",
        dir.display()
    );
    dir
}

/// The fixture's namespace root key (00 01 .. 1f).
pub fn fixture_key() -> RootKey {
    let mut bytes = [0u8; 32];
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = i as u8;
    }
    RootKey::from_bytes(bytes)
}

/// One record as `records.json` describes it.
#[derive(Debug, Clone)]
pub struct FixtureRecord {
    pub offset: usize,
    pub len: usize,
    pub iv_hex: String,
    pub plaintext: String,
}

/// `records.json`, the parts the tests use.
#[derive(Debug, Clone)]
pub struct Fixture {
    pub file_name: String,
    pub chunk_id: ChunkId,
    pub header_hex: String,
    pub stream_id: String,
    pub key_reference: String,
    pub epoch: u64,
    pub nonce_prefix: [u8; 4],
    pub records: Vec<FixtureRecord>,
    pub chunk_bytes: Vec<u8>,
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

pub fn fixture() -> Fixture {
    let dir = fixture_dir();
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("records.json")).unwrap()).unwrap();
    let header = &json["header"];
    let file_name = json["file"].as_str().unwrap().to_owned();
    let records = json["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| FixtureRecord {
            offset: r["offset"].as_u64().unwrap() as usize,
            len: r["len"].as_u64().unwrap() as usize,
            iv_hex: r["iv_hex"].as_str().unwrap().to_owned(),
            plaintext: r["plaintext"].as_str().unwrap().to_owned(),
        })
        .collect();
    let chunk_bytes = std::fs::read(dir.join("store/chunks").join(&file_name)).unwrap();
    Fixture {
        chunk_id: ChunkId::from_hex(header["chunk_id"].as_str().unwrap()).unwrap(),
        header_hex: header["hex"].as_str().unwrap().to_owned(),
        stream_id: header["stream_id"].as_str().unwrap().to_owned(),
        key_reference: header["key_reference"].as_str().unwrap().to_owned(),
        epoch: header["epoch"].as_u64().unwrap(),
        nonce_prefix: unhex(header["nonce_prefix_hex"].as_str().unwrap())
            .try_into()
            .unwrap(),
        file_name,
        records,
        chunk_bytes,
    }
}

impl Fixture {
    /// The fixture's header as annal's type.
    pub fn header(&self) -> ChunkHeader {
        ChunkHeader::new(
            self.epoch,
            &self.key_reference,
            &self.stream_id,
            self.chunk_id,
            self.nonce_prefix,
        )
        .unwrap()
    }

    /// The bytes of record `i`.
    pub fn record_bytes(&self, i: usize) -> &[u8] {
        let r = &self.records[i];
        &self.chunk_bytes[r.offset..r.offset + r.len]
    }
}

/// Copies a directory tree (files and directories only) into `to`, making everything writable
/// by the owner so a test may modify the copy.
pub fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    annal_engine::test_support::copy_tree(from, to).unwrap();
}

/// The fixture's events as drafts (what capture would hand the writer: no id, source or
/// sequence).
pub fn fixture_drafts() -> Vec<annal_schema::EventDraft> {
    fixture()
        .records
        .iter()
        .map(|r| {
            annal_schema::Event::from_json_slice(r.plaintext.as_bytes())
                .unwrap()
                .to_draft()
        })
        .collect()
}

/// The fixture's history keys.
pub fn fixture_keys() -> annal_engine::keys::HistoryKeys {
    annal_engine::keys::HistoryKeys::from_root(fixture_key())
}

/// A writer configuration with the fixture's key reference and epoch 1.
pub fn writer_config() -> annal_engine::store::WriterConfig {
    annal_engine::store::WriterConfig::new(
        annal_engine::keys::KeyReference::new("fixture.history.v1").unwrap(),
        std::num::NonZeroU64::MIN,
    )
}

/// A fresh store in a temporary namespace directory.
pub fn new_store() -> (tempfile::TempDir, annal_engine::storage::StoreLayout) {
    let dir = tempfile::tempdir().unwrap();
    let layout = annal_engine::storage::StoreLayout::in_namespace_dir(&dir.path().join("ns"));
    annal_engine::store::create_store(&layout).unwrap();
    (dir, layout)
}

/// The store of `layout` opened for writing.
pub fn open_write(
    layout: &annal_engine::storage::StoreLayout,
) -> std::sync::Arc<dyn annal_engine::storage::Storage> {
    std::sync::Arc::new(
        annal_engine::store::open_store(layout, annal_engine::storage::Access::Write).unwrap(),
    )
}

/// The store of `layout` opened for reading.
pub fn open_read(
    layout: &annal_engine::storage::StoreLayout,
) -> std::sync::Arc<dyn annal_engine::storage::Storage> {
    std::sync::Arc::new(
        annal_engine::store::open_store(layout, annal_engine::storage::Access::Read).unwrap(),
    )
}

/// A system clock, shared.
pub fn clock() -> std::sync::Arc<dyn annal_engine::clock::Clock> {
    std::sync::Arc::new(annal_engine::clock::SystemClock)
}

/// A history writer on `storage` with a seeded random source.
pub fn writer(
    storage: std::sync::Arc<dyn annal_engine::storage::Storage>,
    seed: u64,
) -> annal_engine::store::StoreWriter<annal_engine::store::History> {
    annal_engine::store::StoreWriter::open_with_entropy(
        storage,
        fixture_keys(),
        writer_config(),
        clock(),
        Box::new(annal_engine::entropy::SeededEntropy::new(seed)),
    )
    .unwrap()
}

/// Reads the history stream of `layout` with the fixture key.
pub fn read_report(
    layout: &annal_engine::storage::StoreLayout,
) -> annal_engine::store::StoreReport<annal_schema::Event> {
    annal_engine::store::StoreReader::<annal_engine::store::History>::new(open_read(layout))
        .read(&fixture_keys())
        .unwrap()
}

/// The events of `layout`'s history, in sequence order, asserting the store is clean.
pub fn read_events(layout: &annal_engine::storage::StoreLayout) -> Vec<annal_schema::Event> {
    let report = read_report(layout);
    assert!(!report.has_corruption(), "{report:#?}");
    report.records().map(|r| r.event.clone()).collect()
}

/// The fixture draft's content as it must read back: the draft of the stored event.
pub fn content(events: &[annal_schema::Event]) -> Vec<annal_schema::EventDraft> {
    events.iter().map(|e| e.to_draft()).collect()
}

/// The fixture root's seal key.
pub fn seal_key() -> annal_engine::seal::SealKey {
    annal_engine::seal::SealKey::from_purpose_key(&fixture_key().seal_key())
}

/// `verify` of the store behind `storage` with the fixture keys, the checkpoint not consulted.
pub fn verify_offline(
    storage: &std::sync::Arc<dyn annal_engine::storage::Storage>,
) -> annal_engine::seal::VerifyReport {
    annal_engine::seal::verify(
        storage,
        &fixture_keys(),
        &seal_key(),
        annal_engine::seal::CheckpointReading::NotConsulted,
    )
    .unwrap()
}
