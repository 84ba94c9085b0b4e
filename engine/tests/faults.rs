//! Write and sync failures through `FaultyStorage`: a failed write or sync leaves the batch
//! unacknowledged and abandons the chunk (never appended to again, never a retried fsync taken
//! for success), shows `storage_unavailable`, and the next batch starts a new chunk of a new
//! stream once the fault clears; ENOSPC is reported as such and is never a loop; a crash keeps
//! every acknowledged record.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use annal_engine::profile::ChunkVerdict;
use annal_engine::storage::{Access, FaultKind, FaultOp, FaultyStorage, StoreLayout};
use annal_engine::store::{AppendError, History, StoreWriter, TornTailFound, open_store};
use annal_schema::HealthCategory;
use common::*;

fn faulty(layout: &StoreLayout) -> FaultyStorage {
    FaultyStorage::new(open_store(layout, Access::Write).unwrap())
}

fn writer_on(storage: &FaultyStorage) -> StoreWriter<History> {
    StoreWriter::<History>::open(
        Arc::new(storage.clone()),
        fixture_keys(),
        writer_config(),
        clock(),
    )
    .unwrap()
}

fn sequences(events: &[annal_schema::Event]) -> Vec<u64> {
    events.iter().map(|e| e.data.sequence.get()).collect()
}

#[test]
fn a_failed_write_abandons_the_chunk_and_the_next_batch_starts_a_new_one() {
    let (_dir, layout) = new_store();
    let storage = faulty(&layout);
    let drafts = fixture_drafts();
    let mut w = writer_on(&storage);
    w.append(drafts[..4].to_vec()).unwrap();
    assert_eq!(w.sync().unwrap().map(|s| s.get()), Some(4));
    let first_stream = w.stream_id().clone();

    storage.fail_nth(FaultOp::Write, 1, FaultKind::Eio);
    let error = w.append(drafts[4..8].to_vec()).unwrap_err();
    assert!(
        matches!(
            error,
            AppendError::Storage {
                operation: "write",
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(error.lost(), Some(&(5..=8)));
    assert_eq!(
        error.health_category(),
        Some(HealthCategory::StorageUnavailable)
    );
    assert!(!error.is_no_space());
    // Nothing of the failed batch is durable, and the mark did not move.
    assert_eq!(w.sync().unwrap().map(|s| s.get()), Some(4));

    // The fault is gone: the next batch goes into a new chunk of a new stream, with new
    // sequences (the failed batch's are burned).
    let receipt = w.append(drafts[8..10].to_vec()).unwrap();
    assert_eq!(receipt.created.len(), 1);
    assert_ne!(w.stream_id(), &first_stream);
    let new_sequences: Vec<u64> = receipt.records.iter().map(|r| r.sequence).collect();
    assert_eq!(new_sequences, [9, 10]);
    assert_eq!(w.sync().unwrap().map(|s| s.get()), Some(10));
    drop(w);
    let events = read_events(&layout);
    assert_eq!(sequences(&events), [1, 2, 3, 4, 9, 10]);
    let report = read_report(&layout);
    assert_eq!(report.chunks.len(), 2);
}

/// A failed write costs its own batch only: the batches before it, written whole but waiting
/// for their group commit, are synced before the chunk is abandoned, and a crash keeps them.
#[test]
fn a_failed_write_makes_the_unsynced_batches_before_it_durable_not_lost() {
    let (_dir, layout) = new_store();
    let storage = faulty(&layout);
    let drafts = fixture_drafts();
    let mut w = writer_on(&storage);
    w.append(drafts[..2].to_vec()).unwrap();
    w.sync().unwrap();
    w.append(drafts[2..4].to_vec()).unwrap();
    w.append(drafts[4..6].to_vec()).unwrap();
    storage.fail_nth(FaultOp::Write, 1, FaultKind::Eio);
    let error = w.append(drafts[6..9].to_vec()).unwrap_err();
    assert_eq!(error.lost(), Some(&(7..=9)));
    assert_eq!(w.durable_through().map(|s| s.get()), Some(6));
    // A power loss now keeps nothing unsynced: 3..=6 were synced by the salvage.
    storage.crash(&mut |_| 0).unwrap();
    drop(w);
    assert_eq!(sequences(&read_events(&layout)), [1, 2, 3, 4, 5, 6]);
}

/// When the salvage's own sync fails, what it covered is lost with the batch, and that file is
/// never synced again.
#[test]
fn a_failed_salvage_reports_the_unsynced_batches_lost_too() {
    let (_dir, layout) = new_store();
    let storage = faulty(&layout);
    let drafts = fixture_drafts();
    let mut w = writer_on(&storage);
    w.append(drafts[..2].to_vec()).unwrap();
    w.sync().unwrap();
    w.append(drafts[2..4].to_vec()).unwrap();
    storage.fail_nth(FaultOp::Write, 1, FaultKind::Eio);
    storage.fail_nth(FaultOp::Sync, 1, FaultKind::Eio);
    let error = w.append(drafts[4..6].to_vec()).unwrap_err();
    assert_eq!(storage.injected(), 2, "{error}");
    assert_eq!(error.lost(), Some(&(3..=6)));
    assert_eq!(w.durable_through().map(|s| s.get()), Some(2));
    let syncs = storage.count(FaultOp::Sync);
    assert_eq!(w.sync().unwrap().map(|s| s.get()), Some(2));
    assert_eq!(storage.count(FaultOp::Sync), syncs, "no retried sync");
    drop(w);
    assert_eq!(sequences(&read_events(&layout)), [1, 2]);
}

/// A write that fails with nothing unsynced before it syncs nothing: the salvage has no work.
#[test]
fn a_failed_write_with_everything_before_it_durable_syncs_nothing() {
    let (_dir, layout) = new_store();
    let storage = faulty(&layout);
    let drafts = fixture_drafts();
    let mut w = writer_on(&storage);
    w.append(drafts[..2].to_vec()).unwrap();
    w.sync().unwrap();
    let syncs = storage.count(FaultOp::Sync);
    storage.fail_nth(FaultOp::Write, 1, FaultKind::Eio);
    let error = w.append(drafts[2..4].to_vec()).unwrap_err();
    assert_eq!(error.lost(), Some(&(3..=4)));
    assert_eq!(storage.count(FaultOp::Sync), syncs);
}

#[test]
fn a_short_write_leaves_a_torn_tail_in_the_abandoned_chunk_only() {
    let (_dir, layout) = new_store();
    let storage = faulty(&layout);
    let drafts = fixture_drafts();
    let mut w = writer_on(&storage);
    w.append(drafts[..3].to_vec()).unwrap();
    w.sync().unwrap();
    // Half a record reaches the file, then the device fails.
    storage.short_write_nth(1, 300, FaultKind::Eio);
    let error = w.append(drafts[3..5].to_vec()).unwrap_err();
    assert_eq!(error.lost(), Some(&(4..=5)));
    w.append(drafts[5..7].to_vec()).unwrap();
    w.sync().unwrap();
    drop(w);
    let report = read_report(&layout);
    assert!(!report.has_corruption(), "{report:#?}");
    let verdicts: Vec<_> = report.chunks.iter().map(|c| c.verdict.name()).collect();
    assert_eq!(verdicts, ["torn_tail", "complete"]);
    assert_eq!(
        sequences(
            &report
                .records()
                .map(|r| r.event.clone())
                .collect::<Vec<_>>()
        ),
        [1, 2, 3, 6, 7]
    );
    // The abandoned chunk was never appended to after the failure.
    let ChunkVerdict::TornTail { valid_len, .. } = report.chunks[0].verdict else {
        unreachable!()
    };
    assert_eq!(report.chunks[0].len_bytes, valid_len + 300);
    // The next writer finds that tail (and only it) for the journal to record, with what
    // pruning needs of the chunk from its three authenticated records and its whole length.
    let w = writer_on(&storage);
    let times: Vec<_> = report.chunks[0]
        .verdict
        .records()
        .iter()
        .map(|r| r.event.time.since_epoch())
        .collect();
    assert_eq!(
        w.torn_tails_at_open(),
        [TornTailFound {
            chunk_id: report.chunks[0].chunk_id.unwrap(),
            bytes_left_out: 300,
            prunable: Some(annal_engine::store::PruneCandidate {
                chunk_id: report.chunks[0].chunk_id.unwrap(),
                last_sequence: 3,
                last_time: times[2],
                latest_time: times.iter().max().copied(),
                records: 3,
                len_bytes: valid_len + 300,
            }),
        }]
    );
}

#[test]
fn a_clean_store_has_no_torn_tail_to_record() {
    let (_dir, layout) = new_store();
    let storage = faulty(&layout);
    let mut w = writer_on(&storage);
    w.append(fixture_drafts()[..3].to_vec()).unwrap();
    w.sync().unwrap();
    drop(w);
    assert_eq!(writer_on(&storage).torn_tails_at_open(), []);
}

#[test]
fn a_failed_sync_is_never_retried_into_success() {
    let (_dir, layout) = new_store();
    let storage = faulty(&layout);
    let drafts = fixture_drafts();
    let mut w = writer_on(&storage);
    w.append(drafts[..2].to_vec()).unwrap();
    w.sync().unwrap();
    w.append(drafts[2..5].to_vec()).unwrap();
    storage.fail_nth(FaultOp::Sync, 1, FaultKind::Eio);
    let error = w.sync().unwrap_err();
    assert!(
        matches!(
            error,
            AppendError::Storage {
                operation: "sync",
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(error.lost(), Some(&(3..=5)));
    // Asking again does not turn the lost records durable.
    assert_eq!(w.sync().unwrap().map(|s| s.get()), Some(2));
    assert_eq!(w.durable_through().map(|s| s.get()), Some(2));
    let receipt = w.append(drafts[5..6].to_vec()).unwrap();
    assert_eq!(
        receipt.created.len(),
        1,
        "the next batch starts a new chunk"
    );
    assert_eq!(receipt.records[0].sequence, 6);
    assert_eq!(w.sync().unwrap().map(|s| s.get()), Some(6));
    drop(w);
    // The page-cache-dropped model: what the failed sync covered is gone.
    assert_eq!(sequences(&read_events(&layout)), [1, 2, 6]);
}

#[test]
fn enospc_is_reported_as_such_until_space_returns_and_never_loops() {
    let (_dir, layout) = new_store();
    let storage = faulty(&layout);
    let drafts = fixture_drafts();
    let mut w = writer_on(&storage);
    w.append(drafts[..2].to_vec()).unwrap();
    w.sync().unwrap();
    // The disk fills up and stays full.
    storage.fail_from_nth(FaultOp::Write, 1, FaultKind::NoSpace);
    for batch in [2..4, 4..6, 6..8] {
        let error = w.append(drafts[batch].to_vec()).unwrap_err();
        assert!(error.is_no_space(), "{error}");
        assert_eq!(
            error.health_category(),
            Some(HealthCategory::StorageUnavailable)
        );
    }
    // Each refused batch cost a bounded number of operations: no retry loop.
    assert!(
        storage.count(FaultOp::Write) <= 6,
        "{}",
        storage.count(FaultOp::Write)
    );
    storage.clear_faults();
    let receipt = w.append(drafts[8..10].to_vec()).unwrap();
    assert_eq!(receipt.records[0].sequence, 9);
    w.sync().unwrap();
    drop(w);
    assert_eq!(sequences(&read_events(&layout)), [1, 2, 9, 10]);
}

#[test]
fn a_failed_chunk_creation_writes_nothing_into_the_contract_store() {
    let (_dir, layout) = new_store();
    let storage = faulty(&layout);
    let mut w = writer_on(&storage);
    for op in [
        FaultOp::Create,
        FaultOp::Sync,
        FaultOp::Rename,
        FaultOp::SyncDir,
    ] {
        storage.fail_nth(op, 1, FaultKind::Eio);
        let error = w.append(fixture_drafts()[..1].to_vec()).unwrap_err();
        assert_eq!(
            error.health_category(),
            Some(HealthCategory::StorageUnavailable),
            "{op:?}"
        );
    }
    let receipt = w.append(fixture_drafts()[..1].to_vec()).unwrap();
    w.sync().unwrap();
    drop(w);
    // Four failed creations burned four sequences; only complete chunks ever reached chunks/.
    assert_eq!(receipt.records[0].sequence, 5);
    let report = read_report(&layout);
    assert!(!report.has_corruption(), "{report:#?}");
    assert_eq!(sequences(&read_events(&layout)), [5]);
}

#[test]
fn after_a_crash_every_acknowledged_record_reads_back() {
    for keep_fraction in [0u64, 1, 2, 3, 4] {
        let (_dir, layout) = new_store();
        let storage = faulty(&layout);
        let drafts = fixture_drafts();
        let mut w = writer_on(&storage);
        w.append(drafts[..6].to_vec()).unwrap();
        let durable = w.sync().unwrap().map(|s| s.get());
        assert_eq!(durable, Some(6));
        w.append(drafts[6..12].to_vec()).unwrap();
        storage
            .crash(&mut |unsynced| unsynced * keep_fraction / 4)
            .unwrap();
        // The process is gone: its writer and its lock with it.
        drop(w);
        drop(storage);
        let report = read_report(&layout);
        assert!(
            !report.has_corruption(),
            "keep {keep_fraction}/4: {report:#?}"
        );
        let read = sequences(
            &report
                .records()
                .map(|r| r.event.clone())
                .collect::<Vec<_>>(),
        );
        // Every acknowledged record, then a prefix of the unacknowledged ones.
        assert_eq!(&read[..6], [1, 2, 3, 4, 5, 6]);
        assert!(read.len() <= 12);
        assert!(read.windows(2).all(|p| p[1] == p[0] + 1));
        let mut w = writer(open_write(&layout), 77);
        assert_eq!(w.high_water().map(|s| s.get()), read.last().copied());
        let receipt = w.append(drafts[12..].to_vec()).unwrap();
        assert_eq!(receipt.records[0].sequence, *read.last().unwrap() + 1);
        w.sync().unwrap();
        drop(w);
        assert!(!read_report(&layout).has_corruption());
    }
}

/// A writer on `storage` whose chunks hold about the fixture's 16 drafts: they fill most of the
/// 12,000-byte limit (its last eighth is early-rotation room), and a second batch overflows it.
fn small_chunk_writer(storage: &FaultyStorage) -> StoreWriter<History> {
    let mut config = writer_config();
    config.chunk_size_limit_bytes = 12_000;
    StoreWriter::<History>::open(Arc::new(storage.clone()), fixture_keys(), config, clock())
        .unwrap()
}

/// An append that closes a full chunk and then cannot create the next one fails, but the
/// chunk it closed is complete and synced: the next successful append reports it (once), so
/// the writer can seal it.
#[test]
fn a_chunk_closed_by_a_failed_append_is_reported_by_the_next_receipt() {
    let (_dir, layout) = new_store();
    let storage = faulty(&layout);
    let drafts = fixture_drafts();
    let mut w = small_chunk_writer(&storage);
    w.append(drafts.to_vec()).unwrap();
    w.sync().unwrap();
    // The second batch overflows the chunk: it is closed, and the next one is not created.
    storage.fail_nth(FaultOp::Create, 1, FaultKind::Eio);
    let error = w.append(drafts.to_vec()).unwrap_err();
    assert_eq!(storage.injected(), 1, "{error}");
    // The part of the batch that went into the closed chunk is durable, so not lost.
    let closed_through = w.durable_through().unwrap().get();
    assert!(closed_through > 16, "{closed_through}");
    assert_eq!(error.lost(), Some(&(closed_through + 1..=32)));
    storage.clear_faults();
    let receipt = w.append(drafts[..1].to_vec()).unwrap();
    assert_eq!(receipt.closed.len(), 1, "{receipt:?}");
    assert_eq!(receipt.closed[0].first_sequence, 1);
    assert_eq!(receipt.closed[0].last_sequence, closed_through);
    // The failed batch's durable part is reported too, apart from the new batch's record
    // (whose sequence follows the burned ones), with its events, so the shell can index it.
    let sequences = |records: &[annal_engine::store::RecordLocation]| -> Vec<u64> {
        records.iter().map(|r| r.sequence).collect()
    };
    assert_eq!(sequences(&receipt.records), [33]);
    let want: Vec<u64> = (17..=closed_through).collect();
    assert_eq!(sequences(&receipt.recovered), want);
    assert_eq!(
        receipt
            .recovered_events
            .iter()
            .map(|e| e.data.sequence.get())
            .collect::<Vec<_>>(),
        want
    );
    assert_eq!(receipt.created.len(), 1);
    // Reported once.
    let receipt = w.append(drafts[..1].to_vec()).unwrap();
    assert!(receipt.closed.is_empty(), "{receipt:?}");
    assert!(receipt.recovered.is_empty(), "{receipt:?}");
}

/// A rotation whose closing sync fails: that file is never synced again (no salvage of it),
/// and everything it held unsynced is lost with the batch.
#[test]
fn a_chunk_whose_closing_sync_failed_is_not_salvaged() {
    let (_dir, layout) = new_store();
    let storage = faulty(&layout);
    let drafts = fixture_drafts();
    let mut w = small_chunk_writer(&storage);
    w.append(drafts.to_vec()).unwrap();
    storage.fail_nth(FaultOp::Sync, 1, FaultKind::Eio);
    let syncs = storage.count(FaultOp::Sync);
    let error = w.append(drafts.to_vec()).unwrap_err();
    assert!(
        matches!(
            error,
            AppendError::Storage {
                operation: "sync",
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(
        storage.count(FaultOp::Sync),
        syncs + 1,
        "one sync, not retried"
    );
    assert_eq!(error.lost(), Some(&(1..=32)));
    assert_eq!(w.durable_through(), None);
}

#[test]
fn a_nearly_full_chunk_closes_after_a_sync_without_syncing_again() {
    let (_dir, layout) = new_store();
    let storage = faulty(&layout);
    let drafts = fixture_drafts();
    let mut w = small_chunk_writer(&storage);
    let receipt = w.append(drafts[..2].to_vec()).unwrap();
    assert!(receipt.closed.is_empty());
    w.sync().unwrap();
    // Far from full: no early rotation.
    assert_eq!(w.rotate_if_nearly_full().unwrap(), None);

    let receipt = w.append(drafts[2..].to_vec()).unwrap();
    assert!(receipt.closed.is_empty(), "{receipt:?}");
    // Nearly full but not synced: closing now would need a sync, so it waits.
    assert_eq!(w.rotate_if_nearly_full().unwrap(), None);
    assert_eq!(w.sync().unwrap().map(|s| s.get()), Some(16));

    // Synced and nearly full: the close needs no sync (the next one would fail).
    storage.fail_nth(FaultOp::Sync, 1, FaultKind::Eio);
    let closed = w.rotate_if_nearly_full().unwrap().expect("closed early");
    assert_eq!((closed.first_sequence, closed.last_sequence), (1, 16));
    assert_eq!(storage.injected(), 0, "the early close synced");
    storage.clear_faults();

    // The next append starts the next chunk of the same stream.
    let stream = w.stream_id().clone();
    let receipt = w.append(drafts[..1].to_vec()).unwrap();
    assert_eq!(receipt.created.len(), 1);
    assert_eq!(w.stream_id(), &stream);
    w.sync().unwrap();
    drop(w);
    assert_eq!(
        sequences(&read_events(&layout)),
        (1..=17).collect::<Vec<_>>()
    );
}
