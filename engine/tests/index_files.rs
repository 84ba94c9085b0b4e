//! The derived index files: round trip, equality with a full reader scan (annal's stores and
//! the reference fixture), rebuild of missing, stale, tampered and misnamed files, arbitrary
//! bytes, where the files live and what they never show in clear; and the open-time
//! measurement (ignored by default).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use annal_engine::entropy::SeededEntropy;
use annal_engine::index::{
    ChunkEnding, IndexFileError, IndexKey, InvalidIndexFile, LoadIndexError, load_index,
    read_index_file, rebuild_index_files,
};
use annal_engine::profile::ChunkId;
use annal_engine::query::{Index, IndexEntry};
use annal_engine::storage::{Access, Storage, StoreLayout};
use annal_engine::store::{
    History, RecordLocation, StoreReader, StoreWriter, adopt_store, open_store,
};
use common::*;

fn index_key() -> IndexKey {
    IndexKey::new(&fixture_key().index_key())
}

/// A writer with `max_records` per chunk.
fn small_writer(storage: Arc<dyn Storage>, seed: u64, max_records: u64) -> StoreWriter<History> {
    let mut config = writer_config();
    config.max_records_per_chunk = max_records;
    StoreWriter::open_with_entropy(
        storage,
        fixture_keys(),
        config,
        clock(),
        Box::new(SeededEntropy::new(seed)),
    )
    .unwrap()
}

/// A store holding the fixture's 16 events `rounds` times, 4 records per chunk.
fn written_store(rounds: usize) -> (tempfile::TempDir, StoreLayout) {
    let (dir, layout) = new_store();
    let mut w = small_writer(open_write(&layout), 11, 4);
    for _ in 0..rounds {
        w.append(fixture_drafts()).unwrap();
    }
    w.sync().unwrap();
    (dir, layout)
}

/// The index a full reader scan gives: every accepted record, in sequence order.
fn oracle(storage: &Arc<dyn Storage>) -> Index {
    let report = StoreReader::<History>::new(Arc::clone(storage))
        .read(&fixture_keys())
        .unwrap();
    let entries = report
        .events
        .iter()
        .map(|at| {
            let chunk = &report.chunks[at.chunk];
            let record = &chunk.verdict.records()[at.record];
            IndexEntry::of(
                &record.event,
                RecordLocation {
                    chunk_id: chunk.chunk_id.unwrap(),
                    position: record.position,
                    offset: record.offset,
                    len: record.len,
                    sequence: record.sequence(),
                },
            )
        })
        .collect();
    Index::from_entries(entries)
}

fn load(storage: &Arc<dyn Storage>) -> (Index, annal_engine::index::LoadReport) {
    load_index(storage, &fixture_keys(), &index_key()).unwrap()
}

fn index_dir(layout: &StoreLayout) -> PathBuf {
    layout.sidecar().unwrap().join("index")
}

fn index_files(layout: &StoreLayout) -> Vec<PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(index_dir(layout))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

fn chunk_ids(layout: &StoreLayout) -> Vec<ChunkId> {
    let mut ids: Vec<_> = std::fs::read_dir(layout.history_root().join("chunks"))
        .unwrap()
        .map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            ChunkId::from_hex(name.strip_suffix(".cborseq").unwrap()).unwrap()
        })
        .collect();
    ids.sort_by_key(|id| id.0);
    ids
}

fn idx_path(layout: &StoreLayout, id: ChunkId) -> PathBuf {
    index_dir(layout).join(format!("{}.idx", id.to_hex()))
}

fn chunk_len(layout: &StoreLayout, id: ChunkId) -> u64 {
    std::fs::metadata(
        layout
            .history_root()
            .join("chunks")
            .join(format!("{}.cborseq", id.to_hex())),
    )
    .unwrap()
    .len()
}

#[test]
fn index_files_round_trip_and_equal_a_full_scan() {
    let (_dir, layout) = written_store(2);
    let storage = open_write(&layout);
    let expected = oracle(&storage);
    assert_eq!(expected.len(), 32);
    let chunks = chunk_ids(&layout).len() as u64;
    assert_eq!(chunks, 8);

    let (first, report) = load(&storage);
    assert_eq!(first, expected);
    assert_eq!(
        (report.chunks, report.files_used, report.chunks_scanned),
        (chunks, 0, chunks)
    );
    assert_eq!(report.files_rebuilt, chunks);
    assert!(!report.has_corruption() && !report.full_scan);
    assert_eq!(index_files(&layout).len() as u64, chunks);

    let (second, report) = load(&storage);
    assert_eq!(second, expected);
    assert_eq!(
        (
            report.files_used,
            report.chunks_scanned,
            report.files_rebuilt
        ),
        (chunks, 0, 0)
    );

    // One file read directly holds exactly that chunk's entries, in position order.
    for id in chunk_ids(&layout) {
        let index =
            read_index_file(storage.as_ref(), &index_key(), id, chunk_len(&layout, id)).unwrap();
        let of_chunk: Vec<IndexEntry> = expected
            .entries()
            .iter()
            .filter(|e| e.location.chunk_id == id)
            .copied()
            .collect();
        assert_eq!(index.entries, of_chunk);
        assert_eq!(index.ending, ChunkEnding::Complete);
        assert_eq!(index.chunk_len, chunk_len(&layout, id));
    }

    // A read-only open uses the files too, and writes nothing.
    drop(storage);
    let (third, report) = load(&open_read(&layout));
    assert_eq!(third, expected);
    assert_eq!((report.files_used, report.files_rebuilt), (chunks, 0));
}

#[test]
fn a_reference_store_is_indexed_in_memory_then_in_the_sidecar_once_adopted() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("computer-history");
    copy_tree(&fixture_dir().join("store"), &root);
    let before = tree(&root);

    let bare = StoreLayout::contract_store_only(&root);
    let storage: Arc<dyn Storage> = Arc::new(open_store(&bare, Access::Read).unwrap());
    let expected = oracle(&storage);
    assert_eq!(expected.len(), 16);
    let (index, report) = load(&storage);
    assert_eq!(index, expected);
    assert_eq!(
        (
            report.chunks_scanned,
            report.files_used,
            report.files_rebuilt
        ),
        (1, 0, 0)
    );
    drop(storage);

    let layout = StoreLayout::with_sidecar(&root, &dir.path().join("engine"));
    adopt_store(&layout).unwrap();
    let storage = open_write(&layout);
    let (index, report) = load(&storage);
    assert_eq!(index, expected);
    assert_eq!((report.chunks_scanned, report.files_rebuilt), (1, 1));
    let (index, report) = load(&storage);
    assert_eq!(index, expected);
    assert_eq!((report.files_used, report.chunks_scanned), (1, 0));
    drop(storage);
    // The contract store is untouched (the writer lock is created by the write open only).
    let after: Vec<_> = tree(&root)
        .into_iter()
        .filter(|(p, _)| !p.ends_with("writer.lock"))
        .collect();
    let before: Vec<_> = before
        .into_iter()
        .filter(|(p, _)| !p.ends_with("writer.lock"))
        .collect();
    assert_eq!(after, before);
}

/// Every file under `root` with its contents.
fn tree(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(root).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_dir() {
            out.extend(tree(&entry.path()));
        } else {
            out.push((entry.path(), std::fs::read(entry.path()).unwrap()));
        }
    }
    out.sort();
    out
}

#[test]
fn a_missing_file_is_rebuilt() {
    let (_dir, layout) = written_store(1);
    let storage = open_write(&layout);
    let expected = oracle(&storage);
    load(&storage);
    let id = chunk_ids(&layout)[1];
    std::fs::remove_file(idx_path(&layout, id)).unwrap();
    assert!(matches!(
        read_index_file(storage.as_ref(), &index_key(), id, chunk_len(&layout, id)),
        Err(IndexFileError::Missing)
    ));
    let (index, report) = load(&storage);
    assert_eq!(index, expected);
    assert_eq!(
        (
            report.files_used,
            report.chunks_scanned,
            report.files_rebuilt
        ),
        (3, 1, 1)
    );
    assert!(idx_path(&layout, id).is_file());
}

#[test]
fn a_stale_file_is_rebuilt_never_trusted() {
    let (_dir, layout) = new_store();
    let storage = open_write(&layout);
    let mut w = small_writer(Arc::clone(&storage), 5, 8);
    let drafts = fixture_drafts();
    w.append(drafts[..3].to_vec()).unwrap();
    w.sync().unwrap();
    // Indexed while the writer's chunk holds 3 records...
    let (index, _) = load(&storage);
    assert_eq!(index.len(), 3);
    let id = chunk_ids(&layout)[0];
    let covered = chunk_len(&layout, id);
    // ...then the chunk grows.
    w.append(drafts[3..6].to_vec()).unwrap();
    w.sync().unwrap();
    let now = chunk_len(&layout, id);
    assert!(now > covered);
    match read_index_file(storage.as_ref(), &index_key(), id, now) {
        Err(IndexFileError::Stale {
            covered_len_bytes,
            chunk_len_bytes,
        }) => assert_eq!((covered_len_bytes, chunk_len_bytes), (covered, now)),
        other => panic!("{other:?}"),
    }
    let (index, report) = load(&storage);
    assert_eq!(index, oracle(&storage));
    assert_eq!(index.len(), 6);
    assert_eq!(
        (
            report.files_used,
            report.chunks_scanned,
            report.files_rebuilt
        ),
        (0, 1, 1)
    );
    assert_eq!(
        read_index_file(storage.as_ref(), &index_key(), id, now)
            .unwrap()
            .entries
            .len(),
        6
    );
}

#[test]
fn a_tampered_file_is_rejected_and_rebuilt_whatever_byte_flips() {
    let (_dir, layout) = written_store(1);
    let storage = open_write(&layout);
    let expected = oracle(&storage);
    load(&storage);
    let id = chunk_ids(&layout)[2];
    let path = idx_path(&layout, id);
    let len = std::fs::metadata(&path).unwrap().len() as usize;
    for at in 0..len {
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[at] ^= 0x20;
        std::fs::write(&path, &bytes).unwrap();
        let read = read_index_file(storage.as_ref(), &index_key(), id, chunk_len(&layout, id));
        assert!(read.is_err(), "byte {at} flipped was accepted");
        let (index, report) = load(&storage);
        assert_eq!(index, expected, "byte {at}");
        assert_eq!(
            (report.files_used, report.files_rebuilt),
            (3, 1),
            "byte {at}"
        );
    }
    // The last load left a good file again.
    assert!(read_index_file(storage.as_ref(), &index_key(), id, chunk_len(&layout, id)).is_ok());
}

#[test]
fn a_file_of_another_chunk_under_this_name_is_rejected() {
    let (_dir, layout) = written_store(1);
    let storage = open_write(&layout);
    let expected = oracle(&storage);
    load(&storage);
    let ids = chunk_ids(&layout);
    let (a, b) = (ids[0], ids[1]);
    let a_bytes = std::fs::read(idx_path(&layout, a)).unwrap();
    std::fs::write(idx_path(&layout, b), &a_bytes).unwrap();
    assert!(matches!(
        read_index_file(storage.as_ref(), &index_key(), b, chunk_len(&layout, b)),
        Err(IndexFileError::Invalid(InvalidIndexFile::WrongChunk))
    ));
    // Even with its header rewritten to name this chunk and cover its length, the tag fails.
    let mut forged = a_bytes.clone();
    forged[16..32].copy_from_slice(&b.0);
    forged[32..40].copy_from_slice(&chunk_len(&layout, b).to_be_bytes());
    std::fs::write(idx_path(&layout, b), &forged).unwrap();
    assert!(matches!(
        read_index_file(storage.as_ref(), &index_key(), b, chunk_len(&layout, b)),
        Err(IndexFileError::Invalid(InvalidIndexFile::Authentication))
    ));
    let (index, report) = load(&storage);
    assert_eq!(index, expected);
    assert_eq!((report.files_used, report.files_rebuilt), (3, 1));
}

#[test]
fn arbitrary_bytes_never_panic_and_are_never_accepted() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let (_dir, layout) = written_store(1);
    let storage = open_write(&layout);
    load(&storage);
    let id = chunk_ids(&layout)[0];
    let path = idx_path(&layout, id);
    let good = std::fs::read(&path).unwrap();
    let expected_len = chunk_len(&layout, id);
    let mut runner = TestRunner::new(Config {
        cases: 256,
        failure_persistence: None,
        ..Config::default()
    });
    // Any bytes; or the good file with a span overwritten and a random truncation.
    let strategy = prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..600),
        (
            0..good.len(),
            proptest::collection::vec(any::<u8>(), 1..64),
            0..=good.len()
        )
            .prop_map({
                let good = good.clone();
                move |(at, patch, cut)| {
                    let mut bytes = good.clone();
                    for (i, b) in patch.iter().enumerate() {
                        if let Some(slot) = bytes.get_mut(at + i) {
                            *slot = *b;
                        }
                    }
                    bytes.truncate(cut.max(1));
                    bytes
                }
            }),
    ];
    runner
        .run(&strategy, |bytes| {
            std::fs::write(&path, &bytes).unwrap();
            let read = read_index_file(storage.as_ref(), &index_key(), id, expected_len);
            prop_assert!(read.is_err() || bytes == good);
            Ok(())
        })
        .unwrap();
}

#[test]
fn index_files_live_only_in_the_sidecar_and_show_nothing_in_clear() {
    let (_dir, layout) = written_store(1);
    let storage = open_write(&layout);
    load(&storage);
    // Nothing in the contract store but what the reference accepts.
    for (path, _) in tree(layout.history_root()) {
        let name = path.file_name().unwrap().to_str().unwrap();
        assert!(
            !name.ends_with(".idx") && !name.ends_with(".tmp"),
            "{path:?}"
        );
    }
    let chunks: Vec<_> = std::fs::read_dir(layout.history_root().join("chunks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(chunks.iter().all(|n| n.ends_with(".cborseq")));
    // Nothing left in tmp/.
    assert_eq!(
        std::fs::read_dir(layout.sidecar().unwrap().join("tmp"))
            .unwrap()
            .count(),
        0
    );
    // No plaintext marker in any index file.
    let events = read_events(&layout);
    let mut markers: Vec<Vec<u8>> = vec![
        b"input.pointer.click".to_vec(),
        b"cua-driver".to_vec(),
        b"session_started".to_vec(),
        b"com.example.TextEditor".to_vec(),
    ];
    for event in &events {
        markers.push(event.id.as_str().as_bytes().to_vec());
        if let Some(session) = &event.data.session_id {
            markers.push(session.as_str().as_bytes().to_vec());
            markers.push(session.to_bytes().to_vec());
        }
    }
    let report = read_report(&layout);
    for chunk in &report.chunks {
        let stream = chunk.header.as_ref().unwrap().header.stream_id();
        markers.push(stream.as_bytes().to_vec());
    }
    let files = index_files(&layout);
    assert_eq!(files.len(), 4);
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        for marker in &markers {
            assert!(
                !bytes.windows(marker.len()).any(|w| w == marker.as_slice()),
                "{file:?} shows {:?}",
                String::from_utf8_lossy(marker)
            );
        }
    }
}

#[test]
fn corrupt_chunks_contribute_nothing_and_are_reported() {
    let (_dir, layout) = written_store(1);
    let ids = chunk_ids(&layout);
    // Damage a record of a chunk that is not the newest (the reader calls it corrupt).
    let oldest = {
        let report = read_report(&layout);
        report.chunks[0].chunk_id.unwrap()
    };
    let path = layout
        .history_root()
        .join("chunks")
        .join(format!("{}.cborseq", oldest.to_hex()));
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.len() - 3;
    bytes[at] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    let storage = open_write(&layout);
    let expected = oracle(&storage);
    assert_eq!(expected.len(), 12);
    let (index, report) = load(&storage);
    assert_eq!(index, expected);
    assert!(report.has_corruption());
    assert_eq!(report.corrupt, vec![format!("{}.cborseq", oldest.to_hex())]);
    // It gets no index file; the others do.
    assert_eq!(index_files(&layout).len(), ids.len() - 1);
    assert!(!idx_path(&layout, oldest).exists());
    let (again, report) = load(&storage);
    assert_eq!(again, expected);
    assert_eq!(report.corrupt.len(), 1);
    assert_eq!(report.files_used, 3);
}

#[test]
fn a_torn_tail_is_indexed_with_its_ending_and_stays_valid_while_newest() {
    let (_dir, layout) = written_store(1);
    let newest = {
        let report = read_report(&layout);
        report.chunks.last().unwrap().chunk_id.unwrap()
    };
    let path = layout
        .history_root()
        .join("chunks")
        .join(format!("{}.cborseq", newest.to_hex()));
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(&[0x58, 0x40, 1, 2, 3]);
    std::fs::write(&path, &bytes).unwrap();
    let storage = open_write(&layout);
    let expected = oracle(&storage);
    assert_eq!(expected.len(), 16);
    let (index, report) = load(&storage);
    assert_eq!(index, expected);
    assert!(!report.has_corruption());
    let file = read_index_file(storage.as_ref(), &index_key(), newest, bytes.len() as u64).unwrap();
    assert!(matches!(file.ending, ChunkEnding::TornTail { .. }));
    // A new writer generation (a new stream) keeps that chunk the newest of its own stream.
    let mut w = small_writer(Arc::clone(&storage), 99, 4);
    w.append(fixture_drafts()[..6].to_vec()).unwrap();
    w.sync().unwrap();
    drop(w);
    let (index, report) = load(&storage);
    assert_eq!(index, oracle(&storage));
    assert_eq!(index.len(), 22);
    assert!(!report.has_corruption());
    assert_eq!(report.files_used, 4);
}

#[test]
fn rebuild_rewrites_every_file_and_removes_orphans() {
    let (_dir, layout) = written_store(1);
    let storage = open_write(&layout);
    let expected = oracle(&storage);
    load(&storage);
    let ids = chunk_ids(&layout);
    std::fs::remove_file(idx_path(&layout, ids[0])).unwrap();
    std::fs::write(idx_path(&layout, ids[1]), b"garbage").unwrap();
    let orphan = idx_path(&layout, ChunkId([0xee; 16]));
    std::fs::write(&orphan, b"x").unwrap();
    let foreign = index_dir(&layout).join("notes.txt");
    std::fs::write(&foreign, b"left alone").unwrap();
    let (index, report) = rebuild_index_files(&storage, &fixture_keys(), &index_key()).unwrap();
    assert_eq!(index, expected);
    assert!(report.full_scan);
    assert_eq!((report.files_rebuilt, report.orphans_removed), (4, 1));
    assert!(!orphan.exists() && foreign.exists());
    let (_, report) = load(&storage);
    assert_eq!(report.files_used, 4);
    drop(storage);
    assert!(matches!(
        rebuild_index_files(&open_read(&layout), &fixture_keys(), &index_key()),
        Err(LoadIndexError::NotWritable)
    ));
}

#[test]
fn a_read_only_load_never_writes() {
    let (_dir, layout) = written_store(1);
    let (index, report) = load(&open_read(&layout));
    assert_eq!(index, oracle(&open_read(&layout)));
    assert_eq!(
        (
            report.chunks_scanned,
            report.files_rebuilt,
            report.write_failures
        ),
        (4, 0, 0)
    );
    assert!(index_files(&layout).is_empty());
}
