//! The store: layout the reference opens in place, permissions and descriptors, the writer
//! lock, sequence assignment, rotation, per-chunk verdicts, torn tails, ordering and merging.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

use annal_engine::profile::{ChunkVerdict, CorruptReason, UnreadableReason};
use annal_engine::storage::{Access, OpenStorageError, StoreLayout};
use annal_engine::store::{
    CreateStoreError, HISTORY_ROOT_ENTRIES, History, OpenStoreError, OpenWriterError, StoreReader,
    StoreWriter, adopt_store, create_store, open_store, read_state_mirror,
};
use common::*;

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o777
}

fn chunk_files(layout: &StoreLayout) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(layout.history_root().join("chunks"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

#[test]
fn create_append_read_round_trip_with_modes() {
    let (_dir, layout) = new_store();
    let root = layout.history_root();
    assert_eq!(mode(root), 0o700);
    assert_eq!(mode(&root.join("chunks")), 0o700);
    assert_eq!(mode(&root.join(".cua-history-root-v1")), 0o600);
    assert_eq!(
        std::fs::read(root.join(".cua-history-root-v1")).unwrap(),
        b"cua-history-root-v1\n"
    );
    assert_eq!(
        std::fs::read(root.join("state.json")).unwrap(),
        br#"{"enabled":false,"paused":false}"#
    );
    assert_eq!(mode(layout.sidecar().unwrap()), 0o700);
    let drafts = fixture_drafts();
    let mut w = writer(open_write(&layout), 1);
    let receipt = w.append(drafts[..10].to_vec()).unwrap();
    assert_eq!(receipt.records.len(), 10);
    assert_eq!(receipt.created.len(), 1);
    let receipt = w.append(drafts[10..].to_vec()).unwrap();
    assert!(receipt.created.is_empty());
    let sequences: Vec<u64> = receipt.records.iter().map(|r| r.sequence).collect();
    assert_eq!(sequences, (11..=16).collect::<Vec<_>>());
    assert_eq!(w.sync().unwrap().map(|s| s.get()), Some(16));
    drop(w);
    let files = chunk_files(&layout);
    assert_eq!(files.len(), 1);
    assert_eq!(mode(&files[0]), 0o600);
    assert_eq!(mode(&root.join("writer.lock")), 0o600);
    let events = read_events(&layout);
    assert_eq!(events.len(), 16);
    assert_eq!(content(&events), drafts);
    // One generation, one stream: every event's source names the chunk header's stream.
    let report = read_report(&layout);
    let stream = report.chunks[0]
        .header
        .as_ref()
        .unwrap()
        .header
        .stream_id()
        .to_owned();
    for event in &events {
        assert_eq!(event.source.stream_id(), stream);
    }
}

#[test]
fn create_refuses_existing_store_and_foreign_directory_and_adopts_an_empty_one_as_0700() {
    let (dir, layout) = new_store();
    assert!(matches!(
        create_store(&layout),
        Err(CreateStoreError::AlreadyExists { .. })
    ));
    let foreign = dir.path().join("foreign");
    std::fs::create_dir_all(foreign.join("computer-history")).unwrap();
    std::fs::write(foreign.join("computer-history/notes.txt"), b"x").unwrap();
    assert!(matches!(
        create_store(&StoreLayout::in_namespace_dir(&foreign)),
        Err(CreateStoreError::NotEmpty { .. })
    ));
    // An existing empty directory is adopted, and made private.
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(empty.join("computer-history")).unwrap();
    std::fs::set_permissions(
        empty.join("computer-history"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    create_store(&StoreLayout::in_namespace_dir(&empty)).unwrap();
    assert_eq!(mode(&empty.join("computer-history")), 0o700);
}

#[test]
fn symlinked_roots_are_refused() {
    let (dir, layout) = new_store();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(layout.history_root(), &link).unwrap();
    let linked = StoreLayout::with_sidecar(&link, layout.sidecar().unwrap());
    assert!(matches!(
        open_store(&linked, Access::Read),
        Err(OpenStoreError::Storage(OpenStorageError::Symlink { .. }))
    ));
    let plain = dir.path().join("plain");
    std::fs::create_dir_all(&plain).unwrap();
    assert!(matches!(
        open_store(&StoreLayout::contract_store_only(&plain), Access::Read),
        Err(OpenStoreError::NoMarker { .. })
    ));
}

#[test]
fn a_symlinked_or_fifo_chunk_is_unreadable_and_the_rest_still_reads() {
    let (_dir, layout) = new_store();
    let mut first = writer(open_write(&layout), 2);
    first.append(fixture_drafts()[..2].to_vec()).unwrap();
    first.sync().unwrap();
    drop(first);
    let chunks = layout.history_root().join("chunks");
    let target = chunk_files(&layout).remove(0);
    std::os::unix::fs::symlink(&target, chunks.join(format!("{}.cborseq", "ab".repeat(16))))
        .unwrap();
    // A FIFO under a chunk's name: opening it must neither block nor fail the read. Made
    // in-process: spawning `mkfifo` forks this test binary, and the child would hold every
    // descriptor another test has open (a writer's `writer.lock` flock) until it execs.
    let fifo = chunks.join(format!("{}.cborseq", "cd".repeat(16)));
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o600),
        0,
    )
    .unwrap();
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo()
    );
    let report = read_report(&layout);
    assert_eq!(report.records().count(), 2);
    let verdicts: Vec<_> = report.chunks.iter().map(|c| c.verdict.name()).collect();
    assert_eq!(verdicts, ["complete", "unreadable", "unreadable"]);
    assert!(report.has_unreadable());
    assert!(report.chunks.iter().any(|c| matches!(
        c.verdict,
        ChunkVerdict::Unreadable {
            reason: UnreadableReason::Symlink
        }
    )));
    assert!(report.chunks.iter().any(|c| matches!(
        c.verdict,
        ChunkVerdict::Unreadable {
            reason: UnreadableReason::NotRegularFile
        }
    )));
    // The writer opens past them too.
    let reopened = writer(open_write(&layout), 3);
    assert_eq!(reopened.high_water().map(|s| s.get()), Some(2));
}

#[test]
fn an_oversized_chunk_is_unreadable_not_fatal() {
    let (_dir, layout) = new_store();
    let mut first = writer(open_write(&layout), 4);
    first.append(fixture_drafts()[..3].to_vec()).unwrap();
    first.sync().unwrap();
    drop(first);
    let big = layout
        .history_root()
        .join("chunks")
        .join(format!("{}.cborseq", "ef".repeat(16)));
    let file = std::fs::File::create(&big).unwrap();
    file.set_len(annal_engine::store::MAX_CHUNK_FILE_BYTES + 1)
        .unwrap();
    let report = read_report(&layout);
    assert_eq!(report.records().count(), 3);
    assert!(report.chunks.iter().any(|c| matches!(
        c.verdict,
        ChunkVerdict::Unreadable {
            reason: UnreadableReason::TooLarge { .. }
        }
    )));
    writer_opens(&layout);
}

fn writer_opens(layout: &StoreLayout) {
    drop(writer(open_write(layout), 99));
}

#[test]
fn a_swapped_chunks_directory_cannot_redirect_writes() {
    let (dir, layout) = new_store();
    let mut config = writer_config();
    config.max_records_per_chunk = 1;
    let mut w =
        StoreWriter::<History>::open(open_write(&layout), fixture_keys(), config, clock()).unwrap();
    w.append(fixture_drafts()[..1].to_vec()).unwrap();
    // Swap chunks/ for a symlink to elsewhere while the writer runs.
    let chunks = layout.history_root().join("chunks");
    let moved = dir.path().join("moved-chunks");
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::rename(&chunks, &moved).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &chunks).unwrap();
    // Rotation creates a chunk: it must land in the held directory, not behind the symlink.
    w.append(fixture_drafts()[1..3].to_vec()).unwrap();
    w.sync().unwrap();
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    assert_eq!(std::fs::read_dir(&moved).unwrap().count(), 3);
}

#[test]
fn second_writer_fails_fast_while_the_first_lives_and_readers_need_no_lock() {
    let (_dir, layout) = new_store();
    let first = open_write(&layout);
    assert!(matches!(
        open_store(&layout, Access::Write),
        Err(OpenStoreError::Storage(OpenStorageError::Locked))
    ));
    read_report(&layout);
    drop(first);
    open_write(&layout);
}

#[test]
fn a_read_only_storage_cannot_host_a_writer() {
    let (_dir, layout) = new_store();
    let error =
        StoreWriter::<History>::open(open_read(&layout), fixture_keys(), writer_config(), clock())
            .unwrap_err();
    assert!(matches!(error, OpenWriterError::ReadOnly));
}

#[test]
fn each_generation_writes_a_new_chunk_of_a_new_stream_and_order_is_by_sequence() {
    let (_dir, layout) = new_store();
    let drafts = fixture_drafts();
    let mut streams = Vec::new();
    for (seed, range) in [(100u64, 0..4), (101, 4..9), (102, 9..16)] {
        let mut w = writer(open_write(&layout), seed);
        let expected = (range.start > 0).then_some(range.start as u64);
        assert_eq!(w.high_water().map(|s| s.get()), expected);
        streams.push(w.stream_id().clone());
        w.append(drafts[range].to_vec()).unwrap();
        w.sync().unwrap();
    }
    streams.sort();
    streams.dedup();
    assert_eq!(streams.len(), 3, "each generation has its own stream");
    let report = read_report(&layout);
    let firsts: Vec<_> = report
        .chunks
        .iter()
        .map(|c| c.first_record().unwrap().event.data.sequence.get())
        .collect();
    assert_eq!(firsts, vec![1, 5, 10]);
    let sequences: Vec<_> = report
        .records()
        .map(|r| r.event.data.sequence.get())
        .collect();
    assert_eq!(sequences, (1..=16).collect::<Vec<_>>());
}

#[test]
fn rotation_at_the_size_count_and_age_limits() {
    let drafts = fixture_drafts();
    // Size.
    let (_dir, layout) = new_store();
    let mut config = writer_config();
    config.chunk_size_limit_bytes = 2_000;
    let mut w = StoreWriter::<History>::open_with_entropy(
        open_write(&layout),
        fixture_keys(),
        config,
        clock(),
        Box::new(annal_engine::entropy::SeededEntropy::new(3)),
    )
    .unwrap();
    let receipt = w.append(drafts.clone()).unwrap();
    assert!(receipt.created.len() >= 5, "{receipt:?}");
    assert_eq!(receipt.closed.len(), receipt.created.len() - 1);
    w.sync().unwrap();
    drop(w);
    for file in chunk_files(&layout) {
        assert!(std::fs::metadata(file).unwrap().len() <= 2_000);
    }
    assert_eq!(read_events(&layout).len(), 16);
    // Count.
    let (_dir, layout) = new_store();
    let mut config = writer_config();
    config.max_records_per_chunk = 4;
    let mut w =
        StoreWriter::<History>::open(open_write(&layout), fixture_keys(), config, clock()).unwrap();
    let receipt = w.append(drafts.clone()).unwrap();
    assert_eq!(receipt.created.len(), 4);
    let closed: Vec<(u64, u64, u64)> = receipt
        .closed
        .iter()
        .map(|c| (c.records, c.first_sequence, c.last_sequence))
        .collect();
    assert_eq!(closed, [(4, 1, 4), (4, 5, 8), (4, 9, 12)]);
    drop(w);
    let report = read_report(&layout);
    assert!(report.chunks.iter().all(|c| c.verdict.records().len() == 4));
    // Age, on an injected clock.
    let (_dir, layout) = new_store();
    let manual = annal_engine::clock::ManualClock::new(std::time::Duration::from_secs(1_000_000));
    let mut w = StoreWriter::<History>::open(
        open_write(&layout),
        fixture_keys(),
        writer_config(),
        Arc::new(manual.clone()),
    )
    .unwrap();
    w.append(drafts[..2].to_vec()).unwrap();
    assert!(w.rotate_if_due().unwrap().is_none());
    manual.advance(std::time::Duration::from_secs(
        annal_engine::store::write::CHUNK_MAX_AGE_SECS,
    ));
    let closed = w.rotate_if_due().unwrap().expect("an aged chunk closes");
    assert_eq!((closed.first_sequence, closed.last_sequence), (1, 2));
    let receipt = w.append(drafts[2..3].to_vec()).unwrap();
    assert_eq!(receipt.created.len(), 1);
    // An aged chunk rotates once, at the start of the next batch, not once per record.
    manual.advance(std::time::Duration::from_secs(
        annal_engine::store::write::CHUNK_MAX_AGE_SECS,
    ));
    let receipt = w.append(drafts[3..9].to_vec()).unwrap();
    assert_eq!(receipt.created.len(), 1, "{receipt:?}");
    assert_eq!(receipt.closed.len(), 1);
}

#[test]
fn a_draft_breaking_the_write_rules_refuses_the_batch_and_burns_nothing() {
    let (_dir, layout) = new_store();
    let drafts = fixture_drafts();
    let mut w = writer(open_write(&layout), 6);
    w.append(drafts[..3].to_vec()).unwrap();
    // A reference-shaped value that annal reads but never writes.
    let mut bad = drafts[3].clone();
    bad.capability = Some(annal_schema::Capability::new_lenient("Bad Capability").unwrap());
    let error = w.append(vec![drafts[3].clone(), bad]).unwrap_err();
    assert!(
        matches!(
            error,
            annal_engine::store::AppendError::InvalidDraft { index: 1, .. }
        ),
        "{error}"
    );
    assert_eq!(w.high_water().map(|s| s.get()), Some(3));
    w.sync().unwrap();
    drop(w);
    assert_eq!(read_events(&layout).len(), 3);
}

#[test]
fn a_reference_store_is_read_as_it_is_and_written_only_after_adoption() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("computer-history");
    copy_tree(&fixture_dir().join("store"), &root);
    let bare = StoreLayout::contract_store_only(&root);
    let report = StoreReader::<History>::new(Arc::new(open_store(&bare, Access::Read).unwrap()))
        .read(&fixture_keys())
        .unwrap();
    assert_eq!(report.records().count(), 16);
    assert_eq!(report.chunks[0].verdict.name(), "complete");
    // Without a sidecar there is no writing.
    assert!(matches!(
        open_store(&bare, Access::Write),
        Err(OpenStoreError::Storage(OpenStorageError::NotAdopted { .. }))
    ));
    let layout = StoreLayout::with_sidecar(&root, &dir.path().join("engine"));
    assert!(matches!(
        open_store(&layout, Access::Write),
        Err(OpenStoreError::Storage(OpenStorageError::NotAdopted { .. }))
    ));
    let before: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    adopt_store(&layout).unwrap();
    let after: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        before, after,
        "adoption touches nothing inside the contract store"
    );
    let storage = open_write(&layout);
    assert_eq!(
        read_state_mirror(storage.as_ref()).unwrap(),
        Some(annal_engine::store::StateMirror {
            enabled: true,
            paused: false
        })
    );
    let mut w = writer(storage, 7);
    assert_eq!(w.high_water().map(|s| s.get()), Some(16));
    let receipt = w.append(fixture_drafts()[..1].to_vec()).unwrap();
    assert_eq!(receipt.records[0].sequence, 17);
    w.sync().unwrap();
    drop(w);
    assert_eq!(read_events(&layout).len(), 17);
}

#[test]
fn a_damaged_newest_chunk_does_not_lower_the_high_water_mark() {
    let (_dir, layout) = new_store();
    let drafts = fixture_drafts();
    let mut w = writer(open_write(&layout), 8);
    w.append(drafts.clone()).unwrap();
    w.sync().unwrap();
    drop(w);
    // Flip a byte inside record 5's ciphertext: the chunk is corrupt from there on (an
    // authentication failure followed by more records is no torn tail).
    let chunk = chunk_files(&layout).remove(0);
    let report = read_report(&layout);
    let fifth = &report.chunks[0].verdict.records()[4];
    let mut bytes = std::fs::read(&chunk).unwrap();
    bytes[(fifth.offset + fifth.len - 20) as usize] ^= 1;
    std::fs::write(&chunk, &bytes).unwrap();
    let report = read_report(&layout);
    assert!(matches!(
        report.chunks[0].verdict,
        ChunkVerdict::Corrupt {
            record_index: Some(4),
            reason: CorruptReason::AuthenticationFailed,
            ..
        }
    ));
    assert_eq!(report.last_authenticated_sequence(), Some(16));
    // The writer starts above every sequence that authenticated, not above the readable prefix.
    let w = writer(open_write(&layout), 9);
    assert_eq!(w.high_water().map(|s| s.get()), Some(16));
}

#[test]
fn the_journal_floor_keeps_sequences_from_being_reused_after_their_chunks_are_gone() {
    let (_dir, layout) = new_store();
    let mut config = writer_config();
    config.sequence_floor = annal_schema::Sequence::new(500);
    let mut w =
        StoreWriter::<History>::open(open_write(&layout), fixture_keys(), config, clock()).unwrap();
    let receipt = w.append(fixture_drafts()[..2].to_vec()).unwrap();
    let sequences: Vec<u64> = receipt.records.iter().map(|r| r.sequence).collect();
    assert_eq!(sequences, [501, 502]);
}

#[test]
fn torn_tails_are_accepted_only_in_the_newest_chunk_of_a_stream() {
    let (_dir, layout) = new_store();
    let drafts = fixture_drafts();
    let mut config = writer_config();
    config.max_records_per_chunk = 8;
    let mut w =
        StoreWriter::<History>::open(open_write(&layout), fixture_keys(), config, clock()).unwrap();
    let receipt = w.append(drafts.clone()).unwrap();
    w.sync().unwrap();
    drop(w);
    let [older, newest] = [receipt.created[0], receipt.created[1]];
    let path = |id: annal_engine::profile::ChunkId| {
        layout
            .history_root()
            .join("chunks")
            .join(format!("{}.cborseq", id.to_hex()))
    };
    // Garbage (not zeros, not a record prefix) after the newest chunk's last record: a crash's
    // leftovers, since whatever follows the last authenticated record there is the tail.
    let mut bytes = std::fs::read(path(newest)).unwrap();
    let valid = bytes.len() as u64;
    bytes.extend_from_slice(b"\x01\x02garbage");
    std::fs::write(path(newest), &bytes).unwrap();
    let report = read_report(&layout);
    let newest_report = report
        .chunks
        .iter()
        .find(|c| c.chunk_id == Some(newest))
        .unwrap();
    assert_eq!(
        newest_report.verdict,
        ChunkVerdict::TornTail {
            records: newest_report.verdict.records().to_vec(),
            valid_len: valid
        }
    );
    assert!(!report.has_corruption());
    assert_eq!(report.records().count(), 16);
    // The same bytes after the older chunk of the same stream: corruption.
    let mut bytes = std::fs::read(path(older)).unwrap();
    let cut = bytes.len() - 30;
    bytes.truncate(cut);
    std::fs::write(path(older), &bytes).unwrap();
    let report = read_report(&layout);
    let older_report = report
        .chunks
        .iter()
        .find(|c| c.chunk_id == Some(older))
        .unwrap();
    assert!(
        matches!(
            older_report.verdict,
            ChunkVerdict::Corrupt {
                record_index: Some(7),
                reason: CorruptReason::TruncatedRecord,
                ..
            }
        ),
        "{:?}",
        older_report.verdict
    );
    assert!(report.has_corruption());
}

#[test]
fn a_torn_tail_after_a_crash_stays_readable_and_is_never_appended_to() {
    let (_dir, layout) = new_store();
    let drafts = fixture_drafts();
    let mut w = writer(open_write(&layout), 10);
    w.append(drafts[..15].to_vec()).unwrap();
    w.sync().unwrap();
    drop(w);
    let chunk = chunk_files(&layout).remove(0);
    let bytes = std::fs::read(&chunk).unwrap();
    std::fs::write(&chunk, &bytes[..bytes.len() - 100]).unwrap();
    let mut w = writer(open_write(&layout), 11);
    // Sequence 15 never authenticated, so without the journal's floor the store alone says 14.
    assert_eq!(w.high_water().map(|s| s.get()), Some(14));
    w.append(drafts[15..].to_vec()).unwrap();
    w.sync().unwrap();
    drop(w);
    assert_eq!(std::fs::read(&chunk).unwrap().len(), bytes.len() - 100);
    let report = read_report(&layout);
    let verdicts: Vec<_> = report.chunks.iter().map(|c| c.verdict.name()).collect();
    assert_eq!(verdicts, ["torn_tail", "complete"]);
    assert!(!report.has_corruption());
    assert_eq!(report.records().count(), 15);
}

#[test]
fn a_replayed_last_record_in_the_newest_chunk_is_corrupt_and_never_taken_for_a_torn_tail() {
    let (_dir, layout) = new_store();
    let drafts = fixture_drafts();
    let mut w = writer(open_write(&layout), 12);
    w.append(drafts[..15].to_vec()).unwrap();
    w.sync().unwrap();
    drop(w);
    let chunk = chunk_files(&layout).remove(0);
    let report = read_report(&layout);
    let last = report.chunks[0].verdict.records()[14].clone();
    let mut bytes = std::fs::read(&chunk).unwrap();
    let clean_len = bytes.len() as u64;
    let last_bytes = bytes[last.offset as usize..(last.offset + last.len) as usize].to_vec();
    // A copy of the last record appended again, then the first bytes of another copy (what a
    // torn append would look like, were the replay a crash).
    bytes.extend(&last_bytes);
    bytes.extend(&last_bytes[..40]);
    std::fs::write(&chunk, &bytes).unwrap();
    let report = read_report(&layout);
    assert!(
        matches!(
            report.chunks[0].verdict,
            ChunkVerdict::Corrupt {
                record_index: Some(15),
                reason: CorruptReason::IvPositionMismatch,
                offset,
            } if offset == clean_len
        ),
        "{:?}",
        report.chunks[0].verdict.name()
    );
    assert!(report.has_corruption());
    assert_eq!(report.records().count(), 0, "a corrupt chunk fails closed");
    assert_eq!(report.last_authenticated_sequence(), Some(15));
    // The writer's open finds no torn tail to record or prune, starts above every sequence that
    // authenticated, and writes a new chunk: the replayed chunk is left exactly as found, for
    // the owner to quarantine.
    let mut w = writer(open_write(&layout), 13);
    assert!(w.torn_tails_at_open().is_empty());
    assert_eq!(w.high_water().map(|s| s.get()), Some(15));
    let receipt = w.append(drafts[15..].to_vec()).unwrap();
    assert_eq!(receipt.records[0].sequence, 16);
    w.sync().unwrap();
    drop(w);
    assert_eq!(std::fs::read(&chunk).unwrap(), bytes);
    let report = read_report(&layout);
    let mut verdicts: Vec<_> = report.chunks.iter().map(|c| c.verdict.name()).collect();
    verdicts.sort_unstable();
    assert_eq!(verdicts, ["complete", "corrupt"]);
    assert_eq!(report.records().count(), 1);
}

#[test]
fn wrong_key_is_reported_as_probable_and_refused_for_writing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("computer-history");
    copy_tree(&fixture_dir().join("store"), &root);
    let layout = StoreLayout::with_sidecar(&root, &dir.path().join("engine"));
    adopt_store(&layout).unwrap();
    let wrong = annal_engine::keys::HistoryKeys::from_root(
        annal_engine::keys::RootKey::from_bytes([9; 32]),
    );
    let report = StoreReader::<History>::new(open_read(&layout))
        .read(&wrong)
        .unwrap();
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
        StoreWriter::<History>::open(open_write(&layout), wrong, writer_config(), clock()),
        Err(OpenWriterError::ProbableWrongKey)
    ));
    assert!(!read_report(&layout).probable_wrong_key);
}

#[test]
fn writer_refuses_a_group_writable_root() {
    let (_dir, layout) = new_store();
    std::fs::set_permissions(
        layout.history_root(),
        std::fs::Permissions::from_mode(0o770),
    )
    .unwrap();
    assert!(matches!(
        open_store(&layout, Access::Write),
        Err(OpenStoreError::Storage(
            OpenStorageError::InsecurePermissions { .. }
        ))
    ));
}

#[test]
fn opening_a_writer_removes_only_its_own_abandoned_temp_chunks() {
    let (_dir, layout) = new_store();
    let tmp = layout.sidecar().unwrap().join("tmp");
    let abandoned = tmp.join("chunks.0123456789abcdef0123456789abcdef.cborseq.tmp");
    std::fs::write(&abandoned, b"half a header").unwrap();
    let lookalikes = [
        tmp.join("journal.0123456789abcdef0123456789abcdef.cborseq.tmp"),
        tmp.join("chunks.0123456789ABCDEF0123456789abcdef.cborseq.tmp"),
        tmp.join("chunks.notes.tmp"),
    ];
    for path in &lookalikes {
        std::fs::write(path, b"keep").unwrap();
    }
    let w = writer(open_write(&layout), 12);
    assert!(
        !abandoned.exists(),
        "the abandoned temp chunk must be removed"
    );
    for path in &lookalikes {
        assert!(path.exists(), "{} must be left alone", path.display());
    }
    drop(w);
}

/// Every entry below `dir`, as paths relative to it.
fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            out.push(path.strip_prefix(dir).unwrap().display().to_string());
            if std::fs::symlink_metadata(&path).unwrap().is_dir() {
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn after_writes_rotations_a_crash_and_recovery_the_root_holds_only_what_the_reference_accepts() {
    use annal_engine::storage::{FaultKind, FaultOp, FaultyStorage};
    let (_dir, layout) = new_store();
    let drafts = fixture_drafts();
    let mut config = writer_config();
    config.max_records_per_chunk = 3;
    let faulty = FaultyStorage::new(open_store(&layout, Access::Write).unwrap());
    let mut w = StoreWriter::<History>::open(
        Arc::new(faulty.clone()),
        fixture_keys(),
        config.clone(),
        clock(),
    )
    .unwrap();
    w.append(drafts[..8].to_vec()).unwrap();
    w.sync().unwrap();
    annal_engine::store::write_state_mirror(
        &faulty,
        annal_engine::store::StateMirror {
            enabled: true,
            paused: false,
        },
    )
    .unwrap();
    // A rename fails mid-rotation: a temp chunk is left in the sidecar's tmp/.
    faulty.fail_nth(FaultOp::Rename, 1, FaultKind::Eio);
    w.append(drafts[8..12].to_vec()).unwrap_err();
    w.append(drafts[12..14].to_vec()).unwrap();
    // A power loss keeping half of what was never synced.
    faulty.crash(&mut |unsynced| unsynced / 2).unwrap();
    drop(w);
    drop(faulty);
    let mut w =
        StoreWriter::<History>::open(open_write(&layout), fixture_keys(), config, clock()).unwrap();
    w.append(drafts[14..].to_vec()).unwrap();
    w.sync().unwrap();
    drop(w);
    let root = layout.history_root();
    for entry in std::fs::read_dir(root).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(
            HISTORY_ROOT_ENTRIES.contains(&name.as_str()),
            "{name} is not an entry the reference accepts"
        );
    }
    for entry in std::fs::read_dir(root.join("chunks")).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        assert!(
            name.ends_with(".cborseq") && !name.starts_with('.'),
            "{name}"
        );
        assert!(entry.file_type().unwrap().is_file());
    }
    // Everything else annal made lives in the sidecar.
    let sidecar = tree(layout.sidecar().unwrap());
    assert!(sidecar.contains(&"tmp".to_owned()) && sidecar.contains(&"journal".to_owned()));
    let report = read_report(&layout);
    assert!(report.foreign_entries.is_empty());
    assert!(!report.has_corruption(), "{report:#?}");
}

/// An import (`StoreWriter::append_imported`): events written in one store, then written with
/// their own ids, sources and sequences into a new one (two streams, with gaps), read back
/// byte for byte, every record under the chunk of its own stream; a batch below the high
/// water, or naming two streams, writes nothing and uses no sequence; a capture after the
/// import continues above it.
#[test]
fn imported_events_keep_their_ids_sources_and_sequences() {
    let drafts = fixture_drafts();
    // The source store: two generations (a reopened writer starts a new stream), with a gap.
    let (_a, source_layout) = new_store();
    let mut w = writer(open_write(&source_layout), 1);
    w.append(drafts[..6].to_vec()).unwrap();
    w.sync().unwrap();
    drop(w);
    let mut w = writer(open_write(&source_layout), 2);
    w.append(drafts[6..].to_vec()).unwrap();
    w.sync().unwrap();
    drop(w);
    let mut exported = read_events(&source_layout);
    // Leave sequences 3 and 4 out: the archive's gap.
    exported.retain(|e| !(3..=4).contains(&e.data.sequence.get()));
    let streams: std::collections::BTreeSet<_> =
        exported.iter().map(|e| e.source.clone()).collect();
    assert_eq!(streams.len(), 2);

    let (_b, layout) = new_store();
    let mut w = writer(open_write(&layout), 3);
    // Refused batches write nothing.
    let mixed = vec![exported[0].clone(), exported.last().unwrap().clone()];
    assert!(w.append_imported(mixed).unwrap_err().is_refused());
    let split = exported
        .iter()
        .position(|e| e.source != exported[0].source)
        .unwrap();
    w.append_imported(exported[..split].to_vec()).unwrap();
    let below = vec![exported[0].clone()];
    assert!(w.append_imported(below).unwrap_err().is_refused());
    w.append_imported(exported[split..].to_vec()).unwrap();
    w.sync().unwrap();
    assert_eq!(
        w.high_water().map(|s| s.get()),
        exported.last().map(|e| e.data.sequence.get())
    );
    drop(w);

    let imported = read_events(&layout);
    assert_eq!(imported, exported);
    for (a, b) in imported.iter().zip(&exported) {
        assert_eq!(a.to_json_vec(), b.to_json_vec());
    }
    let report = read_report(&layout);
    assert_eq!(report.chunks.len(), 2);
    for chunk in &report.chunks {
        assert!(
            matches!(chunk.verdict, ChunkVerdict::Complete { .. }),
            "{:?}",
            chunk.verdict
        );
    }

    // A capture after the import continues above its last sequence, in a stream of its own.
    let mut w = writer(open_write(&layout), 4);
    let receipt = w.append(drafts[..1].to_vec()).unwrap();
    assert_eq!(
        receipt.records[0].sequence,
        exported.last().unwrap().data.sequence.get() + 1
    );
    assert!(!streams.contains(&receipt.events[0].source));
}
