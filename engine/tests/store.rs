//! The chunk store: layout, permissions, the writer lock, rotation, ordering and merging.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use annal_engine::entropy::SeededEntropy;
use annal_engine::keys::RootKey;
use annal_engine::profile::{ChunkVerdict, CorruptReason};
use annal_engine::store::{
    AppendError, CreateStoreError, OpenStoreError, OpenWriterError, ReadStoreError, StoreKind,
    StoreReader, StoreWriter, WriterConfig, create_store,
};
use common::{copy_tree, fixture, fixture_dir, fixture_key};

fn key() -> Arc<RootKey> {
    Arc::new(fixture_key())
}

fn config() -> WriterConfig {
    WriterConfig::new("6dd3aa1eef99854a9a3d39ba1e2315f1", "fixture.history.v1", 1)
}

fn plaintexts() -> Vec<String> {
    fixture().records.into_iter().map(|r| r.plaintext).collect()
}

fn as_slices(p: &[String]) -> Vec<&[u8]> {
    p.iter().map(|s| s.as_bytes()).collect()
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o777
}

fn chunk_files(root: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(root.join("chunks"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

fn read_plaintexts(root: &Path) -> Vec<Vec<u8>> {
    let report = StoreReader::open(root)
        .unwrap()
        .read(&fixture_key())
        .unwrap();
    assert!(!report.has_corruption(), "{report:?}");
    report.records().map(|r| r.plaintext.clone()).collect()
}

#[test]
fn create_append_read_round_trip_with_modes() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    create_store(&root).unwrap();
    assert_eq!(mode(&root), 0o700);
    assert_eq!(mode(&root.join("chunks")), 0o700);
    assert_eq!(mode(&root.join(".annal-store-v1")), 0o600);
    let events = plaintexts();
    let mut writer = StoreWriter::open(&root, key(), config()).unwrap();
    let mut entropy = SeededEntropy::new(1);
    let receipt = writer
        .append(&as_slices(&events[..10]), &mut entropy)
        .unwrap();
    assert_eq!(receipt.records, 10);
    assert_eq!(receipt.chunks_created, 1);
    let receipt = writer
        .append(&as_slices(&events[10..]), &mut entropy)
        .unwrap();
    assert_eq!(receipt.chunks_created, 0);
    assert_eq!(receipt.last_sequence, Some(16));
    writer.sync().unwrap();
    drop(writer);
    let files = chunk_files(&root);
    assert_eq!(files.len(), 1);
    assert_eq!(mode(&files[0]), 0o600);
    assert_eq!(mode(&root.join("writer.lock")), 0o600);
    let read = read_plaintexts(&root);
    assert_eq!(read.len(), 16);
    for (ours, theirs) in read.iter().zip(&events) {
        assert_eq!(ours, theirs.as_bytes());
    }
    assert_eq!(StoreReader::open(&root).unwrap().kind(), StoreKind::Annal);
}

#[test]
fn create_refuses_existing_store_foreign_directory_and_symlink() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    create_store(&root).unwrap();
    assert!(matches!(
        create_store(&root),
        Err(CreateStoreError::AlreadyExists { .. })
    ));
    let foreign = dir.path().join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("notes.txt"), b"x").unwrap();
    assert!(matches!(
        create_store(&foreign),
        Err(CreateStoreError::NotEmpty { .. })
    ));
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&root, &link).unwrap();
    assert!(matches!(
        create_store(&link),
        Err(CreateStoreError::Symlink { .. })
    ));
    // An empty existing directory is adopted.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    create_store(&empty).unwrap();
}

#[test]
fn open_refuses_symlinked_root_and_unmarked_directory() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    create_store(&root).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&root, &link).unwrap();
    assert!(matches!(
        StoreReader::open(&link),
        Err(OpenStoreError::Symlink { .. })
    ));
    assert!(matches!(
        StoreWriter::open(&link, key(), config()),
        Err(OpenWriterError::Store(OpenStoreError::Symlink { .. }))
    ));
    let plain = dir.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    assert!(matches!(
        StoreReader::open(&plain),
        Err(OpenStoreError::NoMarker { .. })
    ));
}

#[test]
fn symlinked_chunk_or_chunks_dir_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    create_store(&root).unwrap();
    let events = plaintexts();
    let mut writer = StoreWriter::open(&root, key(), config()).unwrap();
    writer
        .append(&as_slices(&events[..2]), &mut SeededEntropy::new(2))
        .unwrap();
    drop(writer);
    let target = chunk_files(&root).remove(0);
    let link = root
        .join("chunks")
        .join(format!("{}.cborseq", "ab".repeat(16)));
    std::os::unix::fs::symlink(&target, &link).unwrap();
    assert!(matches!(
        StoreReader::open(&root).unwrap().read(&fixture_key()),
        Err(ReadStoreError::Symlink { .. })
    ));
    std::fs::remove_file(&link).unwrap();
    assert_eq!(read_plaintexts(&root).len(), 2);
    // chunks/ itself replaced by a symlink.
    let real = dir.path().join("real-chunks");
    std::fs::rename(root.join("chunks"), &real).unwrap();
    std::os::unix::fs::symlink(&real, root.join("chunks")).unwrap();
    assert!(matches!(
        StoreReader::open(&root).unwrap().read(&fixture_key()),
        Err(ReadStoreError::Symlink { .. })
    ));
}

#[test]
fn symlinked_writer_lock_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    create_store(&root).unwrap();
    let elsewhere = dir.path().join("elsewhere.lock");
    std::os::unix::fs::symlink(&elsewhere, root.join("writer.lock")).unwrap();
    assert!(matches!(
        StoreWriter::open(&root, key(), config()),
        Err(OpenWriterError::Store(OpenStoreError::Symlink { .. }))
    ));
    assert!(
        !elsewhere.exists(),
        "the symlink target must not be created"
    );
}

#[test]
fn second_writer_fails_fast_while_the_first_lives() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    create_store(&root).unwrap();
    let first = StoreWriter::open(&root, key(), config()).unwrap();
    assert!(matches!(
        StoreWriter::open(&root, key(), config()),
        Err(OpenWriterError::Locked)
    ));
    // A reader needs no lock.
    StoreReader::open(&root)
        .unwrap()
        .read(&fixture_key())
        .unwrap();
    drop(first);
    StoreWriter::open(&root, key(), config()).unwrap();
}

#[test]
fn each_generation_writes_a_new_chunk_and_order_is_by_sequence() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    create_store(&root).unwrap();
    let events = plaintexts();
    // Seeds chosen freely; whatever the random names, the order must come from data.sequence.
    for (generation, range) in [(0u64, 0..4), (1, 4..9), (2, 9..16)] {
        let mut writer = StoreWriter::open(&root, key(), config()).unwrap();
        let expected_last = (range.start > 0).then_some(range.start as u64);
        assert_eq!(writer.last_sequence(), expected_last);
        writer
            .append(
                &as_slices(&events[range]),
                &mut SeededEntropy::new(100 + generation),
            )
            .unwrap();
        writer.sync().unwrap();
    }
    assert_eq!(chunk_files(&root).len(), 3);
    let report = StoreReader::open(&root)
        .unwrap()
        .read(&fixture_key())
        .unwrap();
    let firsts: Vec<_> = report.chunks.iter().map(|c| c.first_sequence()).collect();
    assert_eq!(firsts, vec![Some(1), Some(5), Some(10)]);
    let mut names: Vec<_> = report.chunks.iter().map(|c| c.file_name.clone()).collect();
    let by_sequence = names.clone();
    names.sort();
    assert_ne!(
        names, by_sequence,
        "test seeds must make name order differ from sequence order"
    );
    let sequences: Vec<_> = report.records().map(|r| r.sequence()).collect();
    assert_eq!(sequences, (1..=16).collect::<Vec<_>>());
}

#[test]
fn rotation_at_the_size_limit() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    create_store(&root).unwrap();
    let mut cfg = config();
    cfg.chunk_size_limit_bytes = 2_000;
    let events = plaintexts();
    let mut writer = StoreWriter::open(&root, key(), cfg).unwrap();
    let receipt = writer
        .append(&as_slices(&events), &mut SeededEntropy::new(3))
        .unwrap();
    assert!(receipt.chunks_created >= 5, "{receipt:?}");
    writer.sync().unwrap();
    drop(writer);
    let files = chunk_files(&root);
    assert_eq!(files.len(), receipt.chunks_created);
    for file in &files {
        assert!(std::fs::metadata(file).unwrap().len() <= 2_000);
    }
    assert_eq!(read_plaintexts(&root).len(), 16);
}

#[test]
fn rotation_at_the_record_limit() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    create_store(&root).unwrap();
    let mut cfg = config();
    cfg.max_records_per_chunk = 4;
    let events = plaintexts();
    let mut writer = StoreWriter::open(&root, key(), cfg).unwrap();
    let receipt = writer
        .append(&as_slices(&events), &mut SeededEntropy::new(4))
        .unwrap();
    assert_eq!(receipt.chunks_created, 4);
    drop(writer);
    let report = StoreReader::open(&root)
        .unwrap()
        .read(&fixture_key())
        .unwrap();
    assert!(report.chunks.iter().all(|c| c.verdict.records().len() == 4));
    assert_eq!(report.records().count(), 16);
}

#[test]
fn append_validates_the_whole_batch_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    create_store(&root).unwrap();
    let events = plaintexts();
    let mut writer = StoreWriter::open(&root, key(), config()).unwrap();
    let mut entropy = SeededEntropy::new(5);
    writer
        .append(&as_slices(&events[..3]), &mut entropy)
        .unwrap();
    // Sequence 2 again, after 3.
    let err = writer
        .append(&[events[3].as_bytes(), events[1].as_bytes()], &mut entropy)
        .unwrap_err();
    assert!(matches!(
        err,
        AppendError::SequenceNotIncreasing {
            index: 1,
            sequence: 2,
            after: 4
        }
    ));
    let err = writer
        .append(&[events[3].as_bytes(), b"{}"], &mut entropy)
        .unwrap_err();
    assert!(matches!(err, AppendError::InvalidEvent { index: 1, .. }));
    assert_eq!(writer.last_sequence(), Some(3));
    drop(writer);
    assert_eq!(read_plaintexts(&root).len(), 3);
}

#[test]
fn reference_store_is_read_and_extended() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    copy_tree(&fixture_dir().join("store"), &root);
    let reader = StoreReader::open(&root).unwrap();
    assert_eq!(reader.kind(), StoreKind::Reference);
    let report = reader.read(&fixture_key()).unwrap();
    assert_eq!(report.records().count(), 16);
    assert_eq!(report.chunks.len(), 1);
    assert_eq!(report.chunks[0].verdict.name(), "complete");
    let mut writer = StoreWriter::open(&root, key(), config()).unwrap();
    assert_eq!(writer.last_sequence(), Some(16));
    let next = fixture().records[15]
        .plaintext
        .replace("\"sequence\":16", "\"sequence\":17")
        .replace(
            "773f75ed3c62ba4b5f2f98406d37fe92",
            "00000000000000000000000000000017",
        );
    writer
        .append(&[next.as_bytes()], &mut SeededEntropy::new(6))
        .unwrap();
    drop(writer);
    let read = read_plaintexts(&root);
    assert_eq!(read.len(), 17);
    assert_eq!(read[16], next.as_bytes());
}

#[test]
fn duplicate_chunk_is_ignored_and_a_reused_sequence_is_a_conflict() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    copy_tree(&fixture_dir().join("store"), &root);
    let chunks = root.join("chunks");
    let original = chunks.join(fixture().file_name);
    // A byte-identical copy under another chunk id is not possible (the header names the
    // chunk), so duplicate the events by sealing them again into a second chunk.
    let events = plaintexts();
    {
        let other = tempfile::tempdir().unwrap();
        let other_root = other.path().join("s");
        create_store(&other_root).unwrap();
        let mut writer = StoreWriter::open(&other_root, key(), config()).unwrap();
        writer
            .append(&as_slices(&events[10..]), &mut SeededEntropy::new(7))
            .unwrap();
        drop(writer);
        let copy = chunk_files(&other_root).remove(0);
        std::fs::copy(&copy, chunks.join(copy.file_name().unwrap())).unwrap();
    }
    let report = StoreReader::open(&root)
        .unwrap()
        .read(&fixture_key())
        .unwrap();
    assert_eq!(report.chunks.len(), 2);
    assert!(report.conflicts.is_empty());
    assert_eq!(report.records().count(), 16);
    assert!(!report.has_corruption());
    // Now a chunk holding a different event with sequence 12.
    let changed = events[11].replace("\"effect\":\"refused\"", "\"effect\":\"failed\"");
    assert_ne!(changed, events[11]);
    {
        let other = tempfile::tempdir().unwrap();
        let other_root = other.path().join("s");
        create_store(&other_root).unwrap();
        let mut writer = StoreWriter::open(&other_root, key(), config()).unwrap();
        writer
            .append(&[changed.as_bytes()], &mut SeededEntropy::new(8))
            .unwrap();
        drop(writer);
        let copy = chunk_files(&other_root).remove(0);
        std::fs::copy(&copy, chunks.join(copy.file_name().unwrap())).unwrap();
    }
    let report = StoreReader::open(&root)
        .unwrap()
        .read(&fixture_key())
        .unwrap();
    assert_eq!(report.conflicts.len(), 1);
    assert_eq!(report.conflicts[0].sequence, 12);
    assert!(report.has_corruption());
    assert!(original.exists());
}

#[test]
fn wrong_key_is_reported_as_probable_and_refused_for_writing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    copy_tree(&fixture_dir().join("store"), &root);
    let wrong = RootKey::from_bytes([9; 32]);
    let report = StoreReader::open(&root).unwrap().read(&wrong).unwrap();
    assert!(report.probable_wrong_key);
    assert_eq!(report.records().count(), 0);
    assert!(matches!(
        report.chunks[0].verdict,
        ChunkVerdict::Corrupt {
            record_index: Some(0),
            reason: CorruptReason::AuthenticationFailed,
            ..
        }
    ));
    assert!(matches!(
        StoreWriter::open(&root, Arc::new(wrong), config()),
        Err(OpenWriterError::ProbableWrongKey)
    ));
    // The right key: not probable.
    let report = StoreReader::open(&root)
        .unwrap()
        .read(&fixture_key())
        .unwrap();
    assert!(!report.probable_wrong_key);
}

#[test]
fn torn_tail_stays_readable_and_is_never_appended_to() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    copy_tree(&fixture_dir().join("store"), &root);
    let chunk = root.join("chunks").join(fixture().file_name);
    let bytes = std::fs::read(&chunk).unwrap();
    std::fs::write(&chunk, &bytes[..bytes.len() - 100]).unwrap();
    let mut writer = StoreWriter::open(&root, key(), config()).unwrap();
    assert_eq!(writer.last_sequence(), Some(15));
    let events = plaintexts();
    writer
        .append(&[events[15].as_bytes()], &mut SeededEntropy::new(9))
        .unwrap();
    drop(writer);
    assert_eq!(std::fs::read(&chunk).unwrap().len(), bytes.len() - 100);
    let report = StoreReader::open(&root)
        .unwrap()
        .read(&fixture_key())
        .unwrap();
    assert_eq!(report.chunks[0].verdict.name(), "torn_tail");
    assert_eq!(report.chunks[1].verdict.name(), "complete");
    assert!(!report.has_corruption());
    let read: Vec<_> = report.records().map(|r| r.plaintext.clone()).collect();
    assert_eq!(read.len(), 16);
    assert_eq!(read[15], events[15].as_bytes());
}

#[test]
fn writer_refuses_a_group_writable_root() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    create_store(&root).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o770)).unwrap();
    assert!(matches!(
        StoreWriter::open(&root, key(), config()),
        Err(OpenWriterError::InsecurePermissions { .. })
    ));
}

#[test]
fn leftover_temporary_chunk_is_not_a_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    create_store(&root).unwrap();
    let fx = fixture();
    // A crash after creating the temporary file but before the rename.
    std::fs::write(
        root.join("chunks").join(format!(".{}.tmp", fx.file_name)),
        &fx.chunk_bytes[..97],
    )
    .unwrap();
    let report = StoreReader::open(&root)
        .unwrap()
        .read(&fixture_key())
        .unwrap();
    assert!(report.chunks.is_empty());
}

#[test]
fn opening_a_writer_removes_only_abandoned_temp_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    create_store(&root).unwrap();
    let chunks = root.join("chunks");
    let abandoned = chunks.join(".0123456789abcdef0123456789abcdef.cborseq.tmp");
    std::fs::write(&abandoned, b"half a header").unwrap();
    // Look-alikes that are not exactly the writer's temp-file shape are left alone.
    let lookalikes = [
        chunks.join(".notes.tmp"),
        chunks.join(".0123456789ABCDEF0123456789abcdef.cborseq.tmp"),
        chunks.join("0123456789abcdef0123456789abcdef.cborseq.tmp"),
    ];
    for path in &lookalikes {
        std::fs::write(path, b"keep").unwrap();
    }
    let writer = StoreWriter::open(&root, key(), config()).unwrap();
    assert!(
        !abandoned.exists(),
        "the abandoned temp chunk must be removed"
    );
    for path in &lookalikes {
        assert!(path.exists(), "{} must be left alone", path.display());
    }
    drop(writer);
}

/// Every byte under a store root, file by file.
fn every_file(root: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push((path.clone(), std::fs::read(&path).unwrap()));
            }
        }
    }
    out
}

#[test]
fn raw_files_never_hold_event_values_or_key_material() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("store");
    create_store(&root).unwrap();
    let events = plaintexts();
    let mut writer = StoreWriter::open(&root, key(), config()).unwrap();
    writer
        .append(&as_slices(&events), &mut SeededEntropy::new(11))
        .unwrap();
    writer.sync().unwrap();
    drop(writer);

    // Values from inside the events: capability, application identity, opaque ids, enum values.
    let mut planted: Vec<String> = vec![
        "input.pointer.click".into(),
        "Text Editor".into(),
        "com.example.TextEditor".into(),
        "b11ddce8dbd1872c9250e3f67dad2d9d".into(),
        "retry_with_foreground_delivery".into(),
        "cua-driver.history".into(),
        "specversion".into(),
    ];
    for event in &events {
        let value: serde_json::Value = serde_json::from_str(event).unwrap();
        planted.push(value["id"].as_str().unwrap().to_owned());
    }
    // The root key, raw and as hex, and the chunk key of the fixture chunk id.
    let root_key_hex = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
    let root_key_raw: Vec<u8> = (0u8..32).collect();
    let files = every_file(&root);
    assert!(files.len() >= 3, "marker, lock and at least one chunk");
    for (path, bytes) in &files {
        for needle in &planted {
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle.as_bytes()),
                "{} holds the plaintext value {needle:?}",
                path.display()
            );
        }
        assert!(
            !bytes.windows(32).any(|w| w == root_key_raw.as_slice()),
            "{}",
            path.display()
        );
        assert!(
            !bytes.windows(64).any(|w| w == root_key_hex.as_bytes()),
            "{}",
            path.display()
        );
    }
}
