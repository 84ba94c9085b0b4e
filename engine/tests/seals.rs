//! Seals and `verify` on real stores written by `StoreWriter<History>`: small chunks, so several
//! close; each closed chunk is sealed as the append receipt reports it, chained to the previous
//! seal, and the checkpoint follows. A clean store verifies clean; then each test makes one
//! deliberate manipulation of its own temporary store and asserts the exact finding.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use annal_engine::journal::{Journal, JournalEvent, State};
use annal_engine::keys::{JournalKeys, KeyReference};
use annal_engine::profile::{ChunkId, CorruptReason};
use annal_engine::seal::{
    Checkpoint, CheckpointReading, CheckpointStore, ChunkCheck, ChunkFinding, InMemoryCheckpoints,
    Mismatch, Seal, SealError, SealFault, SealKey, StoreFinding, VerifyReport, chain_digest,
    chain_tip, read_seals, seal_chunk, seal_file_name, verify,
};
use annal_engine::storage::{Storage, StoreLayout};
use annal_engine::store::{
    ClosedChunk, QuarantineError, RecordLocation, StoreReader, chunk_file_name, quarantine_chunk,
};
use common::{
    fixture_drafts, fixture_key, fixture_keys, new_store, open_read, open_write, seal_key,
    verify_offline,
};

/// Records per chunk: the 16 fixture drafts fill four chunks.
const RECORDS_PER_CHUNK: u64 = 4;

/// What one writer session produced.
struct Session {
    /// Closed chunks, in the order the receipts reported them.
    closed: Vec<ClosedChunk>,
    /// Seals written, in chain order.
    seals: Vec<Seal>,
    /// Where every record went.
    locations: Vec<RecordLocation>,
}

/// One writer generation appends the fixture drafts `rounds` times (four records per append)
/// and seals each closed chunk as its receipt reports it, chained to the store's newest seal;
/// the checkpoint follows each seal. `swap_first_two` seals the first two closed chunks in the
/// wrong order (what only a holder of the seal key can do).
fn session(
    layout: &StoreLayout,
    seed: u64,
    rounds: usize,
    checkpoints: &InMemoryCheckpoints,
    swap_first_two: bool,
) -> Session {
    let storage = open_write(layout);
    let key = seal_key();
    let mut tip: Option<Seal> = chain_tip(&read_seals(storage.as_ref(), &key).unwrap()).cloned();
    let mut config = common::writer_config();
    config.max_records_per_chunk = RECORDS_PER_CHUNK;
    let mut writer =
        annal_engine::store::StoreWriter::<annal_engine::store::History>::open_with_entropy(
            Arc::clone(&storage),
            fixture_keys(),
            config,
            common::clock(),
            Box::new(annal_engine::entropy::SeededEntropy::new(seed)),
        )
        .unwrap();
    let mut out = Session {
        closed: Vec::new(),
        seals: Vec::new(),
        locations: Vec::new(),
    };
    let mut held: Option<ClosedChunk> = None;
    let seal = |closed: &ClosedChunk, tip: &mut Option<Seal>, seals: &mut Vec<Seal>| {
        let seal = seal_chunk(storage.as_ref(), closed, tip.as_ref(), &key).unwrap();
        checkpoints.store(&Checkpoint::of(&seal)).unwrap();
        seals.push(seal.clone());
        *tip = Some(seal);
    };
    for _ in 0..rounds {
        for batch in fixture_drafts().chunks(RECORDS_PER_CHUNK as usize) {
            let receipt = writer.append(batch.to_vec()).unwrap();
            writer.sync().unwrap();
            out.locations.extend(receipt.records);
            for closed in receipt.closed {
                out.closed.push(closed.clone());
                if swap_first_two && out.closed.len() == 1 {
                    held = Some(closed);
                    continue;
                }
                seal(&closed, &mut tip, &mut out.seals);
                if let Some(first) = held.take() {
                    seal(&first, &mut tip, &mut out.seals);
                }
            }
        }
    }
    out
}

/// A fresh store with one session of `rounds` rounds (`4 * rounds` chunks, all but the newest
/// sealed).
fn sealed_store(rounds: usize) -> (tempfile::TempDir, StoreLayout, Session, InMemoryCheckpoints) {
    let (dir, layout) = new_store();
    let checkpoints = InMemoryCheckpoints::new();
    let s = session(&layout, 7, rounds, &checkpoints, false);
    (dir, layout, s, checkpoints)
}

fn run(layout: &StoreLayout, checkpoints: &InMemoryCheckpoints) -> VerifyReport {
    let storage: Arc<dyn Storage> = open_read(layout);
    verify(
        &storage,
        &fixture_keys(),
        &seal_key(),
        CheckpointReading::Read(checkpoints.load().unwrap()),
    )
    .unwrap()
}

fn chunk_path(layout: &StoreLayout, id: ChunkId) -> PathBuf {
    layout
        .history_root()
        .join("chunks")
        .join(chunk_file_name(id).as_str())
}

fn seal_path(layout: &StoreLayout, id: ChunkId) -> PathBuf {
    layout
        .sidecar()
        .unwrap()
        .join("seals")
        .join(seal_file_name(id).as_str())
}

fn check(report: &VerifyReport, id: ChunkId) -> &ChunkCheck {
    report
        .chunks
        .iter()
        .find(|c| c.chunk_id == Some(id))
        .unwrap_or_else(|| panic!("no check for {id:?} in {report:#?}"))
}

/// Every chunk finding other than `Ok`, as `(chunk id, finding)`.
fn non_ok(report: &VerifyReport) -> Vec<(Option<ChunkId>, ChunkFinding)> {
    report
        .chunks
        .iter()
        .flat_map(|c| {
            c.findings
                .iter()
                .filter(|f| **f != ChunkFinding::Ok)
                .map(move |f| (c.chunk_id, f.clone()))
        })
        .collect()
}

#[test]
fn a_clean_store_verifies_clean() {
    let (_dir, layout, s, checkpoints) = sealed_store(2);
    assert_eq!(s.closed.len(), 7, "eight chunks, the newest still open");
    assert_eq!(s.seals.len(), 7);
    assert_eq!(
        s.seals.iter().map(|x| x.ordinal).collect::<Vec<_>>(),
        (1..=7).collect::<Vec<_>>()
    );
    assert_eq!(s.seals[0].previous, [0u8; 32]);
    for pair in s.seals.windows(2) {
        assert_eq!(pair[1].previous, pair[0].digest());
    }
    let report = run(&layout, &checkpoints);
    assert!(report.is_clean(), "{report:#?}");
    assert_eq!(report.chunks.len(), 8);
    assert_eq!(report.seals, 7);
    assert!(report.checkpoint_checked);
    assert_eq!(
        report.chunks.iter().filter(|c| c.sealed.is_some()).count(),
        7
    );
    // The unsealed one is the newest chunk of the stream.
    let unsealed = report.chunks.iter().find(|c| c.sealed.is_none()).unwrap();
    assert!(
        s.closed
            .iter()
            .all(|c| Some(c.chunk_id) != unsealed.chunk_id)
    );
    assert_eq!(unsealed.findings, [ChunkFinding::Ok]);
    // What verify reads back is exactly what was sealed.
    let read: Vec<Seal> = read_seals(open_read(&layout).as_ref(), &seal_key())
        .unwrap()
        .into_iter()
        .map(|r| r.seal.unwrap())
        .collect();
    let mut written = s.seals.clone();
    written.sort_by_key(|x| x.chunk_id);
    assert_eq!(read, written);
}

#[test]
fn the_writers_chain_digest_is_the_one_recomputed_from_the_file() {
    let (_dir, layout, s, _) = sealed_store(1);
    let report = common::read_report(&layout);
    assert!(!s.closed.is_empty());
    for closed in &s.closed {
        let chunk = report
            .chunks
            .iter()
            .find(|c| c.chunk_id == Some(closed.chunk_id))
            .unwrap();
        let bytes = std::fs::read(chunk_path(&layout, closed.chunk_id)).unwrap();
        let items = chunk.verdict.records().iter().map(|r| {
            let start = usize::try_from(r.offset).unwrap();
            &bytes[start..start + usize::try_from(r.len).unwrap()]
        });
        let recomputed = chain_digest(&chunk.header.as_ref().unwrap().bytes, items);
        assert_eq!(closed.chain, recomputed);
    }
}

#[test]
fn a_chunk_whose_length_changed_since_it_closed_is_not_sealed() {
    let (_dir, layout) = new_store();
    let storage = open_write(&layout);
    let mut config = common::writer_config();
    config.max_records_per_chunk = 2;
    let mut writer = annal_engine::store::StoreWriter::<annal_engine::store::History>::open(
        Arc::clone(&storage),
        fixture_keys(),
        config,
        common::clock(),
    )
    .unwrap();
    let receipt = writer.append(fixture_drafts()[..3].to_vec()).unwrap();
    writer.sync().unwrap();
    let closed = &receipt.closed[0];
    let path = chunk_path(&layout, closed.chunk_id);
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut file, &[0; 9]).unwrap();
    assert!(matches!(
        seal_chunk(storage.as_ref(), closed, None, &seal_key()),
        Err(SealError::ChunkDisagrees { what: "length" })
    ));
    let mut empty = closed.clone();
    empty.records = 0;
    empty.len_bytes += 9;
    assert!(matches!(
        seal_chunk(storage.as_ref(), &empty, None, &seal_key()),
        Err(SealError::ChunkDisagrees { what: "records" })
    ));
    assert!(
        read_seals(storage.as_ref(), &seal_key())
            .unwrap()
            .is_empty()
    );
}

#[test]
fn a_deleted_chunk_is_missing() {
    let (_dir, layout, s, checkpoints) = sealed_store(1);
    let gone = s.seals[1].chunk_id;
    std::fs::remove_file(chunk_path(&layout, gone)).unwrap();
    let report = run(&layout, &checkpoints);
    assert_eq!(
        non_ok(&report),
        [(Some(gone), ChunkFinding::Missing { ordinal: 2 })]
    );
    assert_eq!(report.store, []);
    assert!(!report.is_clean());
}

#[test]
fn a_quarantined_chunk_is_reported_quarantined_recorded_once_and_the_rest_reads() {
    let (_dir, layout, s, checkpoints) = sealed_store(1);
    let aside = s.seals[1].chunk_id;
    let bytes = std::fs::read(chunk_path(&layout, aside)).unwrap();
    let storage = open_write(&layout);
    let journal_keys = JournalKeys::from_namespace_root(&fixture_key());
    let reference = KeyReference::new("fixture.history.v1").unwrap();
    let done =
        quarantine_chunk(&storage, aside, &journal_keys, &reference, common::clock()).unwrap();
    assert!(done.moved && done.recorded, "{done:?}");
    // Again: nothing moves, nothing is recorded twice.
    let again =
        quarantine_chunk(&storage, aside, &journal_keys, &reference, common::clock()).unwrap();
    assert!(!again.moved && !again.recorded, "{again:?}");
    // Unknown chunks are refused; nothing is created.
    assert!(matches!(
        quarantine_chunk(
            &storage,
            ChunkId([9; 16]),
            &journal_keys,
            &reference,
            common::clock()
        ),
        Err(QuarantineError::NoSuchChunk(_))
    ));
    drop(storage);

    // Kept byte for byte, out of chunks/.
    assert!(!chunk_path(&layout, aside).exists());
    let kept = layout
        .sidecar()
        .unwrap()
        .join("quarantine")
        .join(chunk_file_name(aside).as_str());
    assert_eq!(std::fs::read(kept).unwrap(), bytes);
    // verify: quarantined, not missing, and the store is clean otherwise.
    let report = run(&layout, &checkpoints);
    assert_eq!(
        non_ok(&report),
        [(Some(aside), ChunkFinding::Quarantined { ordinal: 2 })]
    );
    assert!(report.is_clean(), "{report:#?}");
    // The journal holds exactly one tombstone.
    let journal = StoreReader::<Journal>::new(open_read(&layout))
        .read(&journal_keys)
        .unwrap();
    let state = State::replay(journal.records().map(|r| &r.event.event));
    assert_eq!(state.quarantined, [aside]);
    let tombstones = journal
        .records()
        .filter(|r| matches!(r.event.event, JournalEvent::ChunkQuarantined { .. }))
        .count();
    assert_eq!(tombstones, 1);
}

#[test]
fn a_chunk_deleted_with_its_seal_leaves_a_gap_in_the_chain() {
    let (_dir, layout, s, checkpoints) = sealed_store(1);
    let gone = s.seals[1].chunk_id;
    std::fs::remove_file(chunk_path(&layout, gone)).unwrap();
    std::fs::remove_file(seal_path(&layout, gone)).unwrap();
    let report = run(&layout, &checkpoints);
    assert_eq!(non_ok(&report), []);
    assert_eq!(report.store, [StoreFinding::ChainGap { after: 1, next: 3 }]);
}

#[test]
fn a_deleted_seal_leaves_its_chunk_unsealed() {
    let (_dir, layout, s, checkpoints) = sealed_store(1);
    let bare = s.seals[0].chunk_id;
    std::fs::remove_file(seal_path(&layout, bare)).unwrap();
    let report = run(&layout, &checkpoints);
    assert_eq!(non_ok(&report), [(Some(bare), ChunkFinding::Unsealed)]);
    assert_eq!(report.store, [StoreFinding::ChainGap { after: 0, next: 2 }]);
}

#[test]
fn seals_chained_out_of_sequence_order_are_reordered() {
    // Only a holder of the seal key can chain seals in another order than the chunks' sequences
    // (a sealer bug); without the key, moving seals between chunks is `name_mismatch` (below).
    let (_dir, layout) = new_store();
    let checkpoints = InMemoryCheckpoints::new();
    let s = session(&layout, 7, 1, &checkpoints, true);
    assert_eq!(s.seals[0].chunk_id, s.closed[1].chunk_id);
    assert_eq!(s.seals[1].chunk_id, s.closed[0].chunk_id);
    let report = run(&layout, &checkpoints);
    assert_eq!(
        non_ok(&report),
        [(
            Some(s.closed[0].chunk_id),
            ChunkFinding::Reordered { ordinal: 2 }
        )]
    );
    assert_eq!(report.store, []);
}

#[test]
fn swapped_seal_files_are_invalid_where_they_lie() {
    let (_dir, layout, s, checkpoints) = sealed_store(1);
    let (a, b) = (s.seals[0].chunk_id, s.seals[1].chunk_id);
    let (pa, pb) = (seal_path(&layout, a), seal_path(&layout, b));
    let (ba, bb) = (std::fs::read(&pa).unwrap(), std::fs::read(&pb).unwrap());
    std::fs::write(&pa, bb).unwrap();
    std::fs::write(&pb, ba).unwrap();
    let report = run(&layout, &checkpoints);
    let name_mismatch = ChunkFinding::SealInvalid {
        fault: SealFault::NameMismatch,
    };
    assert_eq!(
        check(&report, a).findings,
        [name_mismatch.clone(), ChunkFinding::Unsealed]
    );
    assert_eq!(
        check(&report, b).findings,
        [name_mismatch, ChunkFinding::Unsealed]
    );
    assert_eq!(report.store, [StoreFinding::ChainGap { after: 0, next: 3 }]);
}

#[test]
fn a_sealed_chunk_truncated_at_a_record_boundary_is_replaced() {
    let (_dir, layout, s, checkpoints) = sealed_store(1);
    let victim = s.closed[1].chunk_id;
    let last = s
        .locations
        .iter()
        .filter(|l| l.chunk_id == victim)
        .max_by_key(|l| l.position)
        .unwrap();
    let path = chunk_path(&layout, victim);
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(last.offset).unwrap();
    drop(file);
    // On its own the shorter chunk is valid: the reader says complete.
    let reader = common::read_report(&layout);
    let chunk = reader
        .chunks
        .iter()
        .find(|c| c.chunk_id == Some(victim))
        .unwrap();
    assert_eq!(chunk.verdict.name(), "complete");
    assert_eq!(chunk.verdict.records().len(), 3);
    let report = run(&layout, &checkpoints);
    assert_eq!(
        non_ok(&report),
        [(
            Some(victim),
            ChunkFinding::Replaced {
                mismatch: Mismatch::Records
            }
        )]
    );
    assert_eq!(report.store, []);
}

#[test]
fn a_sealed_chunk_put_back_as_an_older_copy_of_itself_is_replaced() {
    // The copy taken while the chunk was still open (two of its four records), put back after
    // it was sealed: valid on its own, shorter than its seal.
    let (dir, layout) = new_store();
    let checkpoints = InMemoryCheckpoints::new();
    let storage = open_write(&layout);
    let mut config = common::writer_config();
    config.max_records_per_chunk = RECORDS_PER_CHUNK;
    let mut writer =
        annal_engine::store::StoreWriter::<annal_engine::store::History>::open_with_entropy(
            Arc::clone(&storage),
            fixture_keys(),
            config,
            common::clock(),
            Box::new(annal_engine::entropy::SeededEntropy::new(3)),
        )
        .unwrap();
    let drafts = fixture_drafts();
    let first = writer.append(drafts[..2].to_vec()).unwrap();
    writer.sync().unwrap();
    let id = first.created[0];
    let early = dir.path().join("early-copy");
    std::fs::copy(chunk_path(&layout, id), &early).unwrap();
    let receipt = writer.append(drafts[2..6].to_vec()).unwrap();
    writer.sync().unwrap();
    assert_eq!(receipt.closed.len(), 1);
    assert_eq!(receipt.closed[0].chunk_id, id);
    let seal = seal_chunk(storage.as_ref(), &receipt.closed[0], None, &seal_key()).unwrap();
    checkpoints.store(&Checkpoint::of(&seal)).unwrap();
    drop(writer);
    drop(storage);
    assert!(run(&layout, &checkpoints).is_clean());
    std::fs::copy(&early, chunk_path(&layout, id)).unwrap();
    let report = run(&layout, &checkpoints);
    assert_eq!(
        non_ok(&report),
        [(
            Some(id),
            ChunkFinding::Replaced {
                mismatch: Mismatch::Records
            }
        )]
    );
}

#[test]
fn a_chunk_copied_under_a_second_name_is_duplicated() {
    let (_dir, layout, s, checkpoints) = sealed_store(1);
    let original = s.closed[0].chunk_id;
    let copy = ChunkId([0x5a; 16]);
    std::fs::copy(chunk_path(&layout, original), chunk_path(&layout, copy)).unwrap();
    let report = run(&layout, &checkpoints);
    assert_eq!(
        non_ok(&report),
        [(Some(copy), ChunkFinding::Duplicated { of: original })]
    );
    assert_eq!(check(&report, original).findings, [ChunkFinding::Ok]);
}

#[test]
fn a_chunk_put_back_after_a_writer_reused_its_sequences_is_duplicated() {
    // The newest two chunks are moved away (the sealed one keeps its seal), a writer without
    // the journal's floor starts above what is left and so reuses their sequences, seals its
    // closed chunk after the existing chain, and the two chunks are put back.
    let (dir, layout, s, checkpoints) = sealed_store(1);
    let moved_sealed = s.closed[2].chunk_id;
    let newest = s
        .locations
        .iter()
        .map(|l| l.chunk_id)
        .find(|id| s.closed.iter().all(|c| c.chunk_id != *id))
        .unwrap();
    let aside = dir.path().join("aside");
    std::fs::create_dir(&aside).unwrap();
    for id in [moved_sealed, newest] {
        std::fs::rename(chunk_path(&layout, id), aside.join(id.to_hex())).unwrap();
    }
    let again = session(&layout, 11, 1, &checkpoints, false);
    let reused = &again.seals[0];
    assert_eq!(reused.ordinal, 4);
    assert_eq!(reused.first_sequence, s.closed[2].first_sequence);
    for id in [moved_sealed, newest] {
        std::fs::rename(aside.join(id.to_hex()), chunk_path(&layout, id)).unwrap();
    }
    let report = run(&layout, &checkpoints);
    let findings = non_ok(&report);
    assert!(
        findings
            .iter()
            .all(|(_, f)| matches!(f, ChunkFinding::Duplicated { .. })),
        "{findings:#?}"
    );
    assert!(
        check(&report, reused.chunk_id)
            .findings
            .contains(&ChunkFinding::Duplicated { of: moved_sealed }),
        "{report:#?}"
    );
    assert_eq!(report.store, []);
}

#[test]
fn a_flipped_seal_byte_is_seal_invalid() {
    let (_dir, layout, s, checkpoints) = sealed_store(1);
    let id = s.seals[1].chunk_id;
    let path = seal_path(&layout, id);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[10] ^= 0x01;
    std::fs::write(&path, bytes).unwrap();
    let report = run(&layout, &checkpoints);
    assert_eq!(
        check(&report, id).findings,
        [
            ChunkFinding::SealInvalid {
                fault: SealFault::BadMac
            },
            ChunkFinding::Unsealed
        ]
    );
    assert_eq!(non_ok(&report).len(), 2);
    assert_eq!(report.store, [StoreFinding::ChainGap { after: 1, next: 3 }]);
}

#[test]
fn a_seal_under_another_key_is_seal_invalid() {
    let (_dir, layout, s, checkpoints) = sealed_store(1);
    let storage: Arc<dyn Storage> = open_read(&layout);
    let other =
        SealKey::from_purpose_key(&annal_engine::keys::RootKey::from_bytes([9; 32]).seal_key());
    let report = verify(
        &storage,
        &fixture_keys(),
        &other,
        CheckpointReading::Read(checkpoints.load().unwrap()),
    )
    .unwrap();
    for seal in &s.seals {
        assert_eq!(
            check(&report, seal.chunk_id).findings[0],
            ChunkFinding::SealInvalid {
                fault: SealFault::BadMac
            }
        );
    }
    assert_eq!(
        report.store,
        [StoreFinding::RolledBack {
            checkpoint: checkpoints.load().unwrap().unwrap(),
            newest: None
        }]
    );
}

#[test]
fn the_store_replaced_with_an_older_copy_is_rolled_back() {
    let (dir, layout, _s, checkpoints) = sealed_store(1);
    let namespace = layout.history_root().parent().unwrap().to_owned();
    let copy = dir.path().join("old-copy");
    common::copy_tree(&namespace, &copy);
    let before = checkpoints.load().unwrap().unwrap();
    let more = session(&layout, 12, 1, &checkpoints, false);
    assert_eq!(more.seals.first().unwrap().ordinal, before.ordinal + 1);
    let after = checkpoints.load().unwrap().unwrap();
    assert!(run(&layout, &checkpoints).is_clean());
    std::fs::remove_dir_all(&namespace).unwrap();
    common::copy_tree(&copy, &namespace);
    let report = run(&layout, &checkpoints);
    assert_eq!(
        report.store,
        [StoreFinding::RolledBack {
            checkpoint: after,
            newest: Some(before)
        }]
    );
    assert_eq!(non_ok(&report), [], "every chunk is fine on its own");
    // Without the checkpoint nothing in the directory tells.
    let storage: Arc<dyn Storage> = open_read(&layout);
    assert!(verify_offline(&storage).is_clean());
    // A checkpoint behind the chain (a crash between a seal and its checkpoint) is fine.
    assert!(
        verify(
            &storage,
            &fixture_keys(),
            &seal_key(),
            CheckpointReading::Read(Some(before))
        )
        .unwrap()
        .is_clean()
    );
}

#[test]
fn seals_without_a_checkpoint_or_an_unreadable_one_cannot_rule_out_a_rollback() {
    let (_dir, layout, _s, checkpoints) = sealed_store(1);
    let newest = checkpoints.load().unwrap().unwrap();
    let storage: Arc<dyn Storage> = open_read(&layout);
    let with = |reading| verify(&storage, &fixture_keys(), &seal_key(), reading).unwrap();
    let missing = with(CheckpointReading::Read(None));
    assert_eq!(missing.store, [StoreFinding::CheckpointMissing { newest }]);
    assert!(missing.checkpoint_checked);
    assert!(!missing.is_clean());
    let unreadable = with(CheckpointReading::Unreadable);
    assert_eq!(unreadable.store, [StoreFinding::CheckpointUnreadable]);
    assert!(!unreadable.checkpoint_checked);
    let offline = with(CheckpointReading::NotConsulted);
    assert!(offline.is_clean());
    assert!(!offline.checkpoint_checked);
    // A store never sealed has nothing to checkpoint: no checkpoint is no finding.
    let (_fresh_dir, fresh) = new_store();
    let storage: Arc<dyn Storage> = open_read(&fresh);
    let report = verify(
        &storage,
        &fixture_keys(),
        &seal_key(),
        CheckpointReading::Read(None),
    )
    .unwrap();
    assert!(report.is_clean(), "{report:#?}");
    assert!(report.checkpoint_checked);
}

#[test]
fn a_torn_newest_chunk_is_a_torn_tail_and_a_flipped_sealed_chunk_is_corrupt() {
    let (_dir, layout, s, checkpoints) = sealed_store(1);
    let newest = s.locations.last().unwrap().chunk_id;
    assert!(s.closed.iter().all(|c| c.chunk_id != newest));
    let path = chunk_path(&layout, newest);
    let mut bytes = std::fs::read(&path).unwrap();
    let last = s.locations.last().unwrap();
    bytes.truncate((last.offset + last.len / 2) as usize);
    let left_out = bytes.len() as u64 - last.offset;
    std::fs::write(&path, bytes).unwrap();
    let sealed = s.closed[0].chunk_id;
    let at = s
        .locations
        .iter()
        .find(|l| l.chunk_id == sealed && l.position == 1)
        .unwrap();
    let sealed_path = chunk_path(&layout, sealed);
    let mut bytes = std::fs::read(&sealed_path).unwrap();
    bytes[(at.offset + at.len - 3) as usize] ^= 0x40;
    std::fs::write(&sealed_path, bytes).unwrap();
    let report = run(&layout, &checkpoints);
    assert_eq!(
        check(&report, newest).findings,
        [ChunkFinding::TornTail {
            bytes_left_out: left_out
        }]
    );
    assert_eq!(
        check(&report, sealed).findings,
        [ChunkFinding::Corrupt {
            reason: CorruptReason::AuthenticationFailed
        }]
    );
    assert_eq!(non_ok(&report).len(), 2);
}

#[test]
fn finding_names_are_stable() {
    let id = ChunkId([1; 16]);
    let names: Vec<&str> = [
        ChunkFinding::Ok,
        ChunkFinding::TornTail { bytes_left_out: 1 },
        ChunkFinding::Corrupt {
            reason: CorruptReason::SourceMismatch,
        },
        ChunkFinding::Missing { ordinal: 1 },
        ChunkFinding::Reordered { ordinal: 1 },
        ChunkFinding::Replaced {
            mismatch: Mismatch::Chain,
        },
        ChunkFinding::Duplicated { of: id },
        ChunkFinding::Unsealed,
        ChunkFinding::SealInvalid {
            fault: SealFault::BadMac,
        },
        ChunkFinding::Quarantined { ordinal: 1 },
    ]
    .iter()
    .map(ChunkFinding::as_str)
    .collect();
    assert_eq!(
        names,
        [
            "ok",
            "torn_tail",
            "corrupt",
            "missing",
            "reordered",
            "replaced",
            "duplicated",
            "unsealed",
            "seal_invalid",
            "quarantined"
        ]
    );
    assert_eq!(
        StoreFinding::RolledBack {
            checkpoint: Checkpoint {
                ordinal: 1,
                digest: [0; 32]
            },
            newest: None
        }
        .as_str(),
        "rolled_back"
    );
}

// --- Opening past sealed chunks: the query reader's lazy index and the writer's open ---

/// The query reader's keys for the fixture's root key.
fn reader_keys() -> annal_engine::query::ReaderKeys {
    let root = fixture_key();
    annal_engine::query::ReaderKeys {
        history: fixture_keys(),
        session: Arc::new(root.session_id_key()),
        index: Arc::new(annal_engine::index::IndexKey::new(&root.index_key())),
        seal: Arc::new(seal_key()),
    }
}

/// A reader over `layout`, read-only (it writes no index file).
fn reader(layout: &StoreLayout) -> annal_engine::query::QueryService {
    annal_engine::query::QueryService::open(open_read(layout), reader_keys(), None).unwrap()
}

fn query(value: serde_json::Value) -> annal_schema::tools::QueryRequest {
    annal_schema::tools::QueryRequest::parse(&value).unwrap()
}

fn sequences(page: &annal_engine::query::EventPage) -> Vec<u64> {
    page.events.iter().map(|e| e.data.sequence.get()).collect()
}

/// Sequences reported lost stay forgotten in the sealed chunks a page loads later (a failed
/// sync may have left their records on disk, and a later life's reader defers that chunk).
#[test]
fn lost_sequences_stay_forgotten_in_chunks_loaded_later() {
    use annal_engine::query::RetentionCutoff;
    let (_dir, layout, _s, _checkpoints) = sealed_store(2);
    let mut reader = reader(&layout);
    assert_eq!(reader.deferred_chunks(), 7);
    // 9..=10 sit in a deferred chunk, 31 in the loaded newest one.
    reader.forget_lost(&(9..=10));
    reader.forget_lost(&(31..=31));
    let all = reader
        .page(
            &query(serde_json::json!({"limit": 200})),
            RetentionCutoff::NONE,
            None,
        )
        .unwrap();
    assert_eq!(reader.deferred_chunks(), 0, "the page loaded every chunk");
    let answered = sequences(&all);
    assert_eq!(answered.len(), 32 - 3);
    assert!(
        !answered.iter().any(|s| [9, 10, 31].contains(s)),
        "{answered:?}"
    );
    let slice = reader
        .page(
            &query(serde_json::json!({"since_sequence": 8, "until_sequence": 11})),
            RetentionCutoff::NONE,
            None,
        )
        .unwrap();
    assert_eq!(sequences(&slice), [8, 11]);
}

#[test]
fn the_query_reader_defers_sealed_chunks_and_loads_them_newest_first_as_pages_reach_back() {
    use annal_engine::query::RetentionCutoff;
    let (_dir, layout, s, _checkpoints) = sealed_store(2);
    assert_eq!(s.seals.len(), 7, "eight chunks, all but the newest sealed");
    let mut reader = reader(&layout);
    assert_eq!(
        reader.deferred_chunks(),
        7,
        "no sealed chunk is read at open"
    );
    assert_eq!(reader.indexed(), 4, "only the unsealed newest chunk is");
    // Newest three: answered from the newest chunk, nothing more loaded.
    let page = reader
        .page(
            &query(serde_json::json!({"limit": 3})),
            RetentionCutoff::NONE,
            None,
        )
        .unwrap();
    assert_eq!(sequences(&page), [30, 31, 32]);
    assert!(page.has_more);
    assert_eq!(reader.deferred_chunks(), 7);
    // Newest six reach into the newest sealed chunk: exactly one more is loaded.
    let page = reader
        .page(
            &query(serde_json::json!({"limit": 6})),
            RetentionCutoff::NONE,
            None,
        )
        .unwrap();
    assert_eq!(sequences(&page), (27..=32).collect::<Vec<_>>());
    assert_eq!(reader.deferred_chunks(), 6);
    // A slice deep in the past loads down to it, and no further.
    let page = reader
        .page(
            &query(serde_json::json!({"since_sequence": 9, "until_sequence": 10})),
            RetentionCutoff::NONE,
            None,
        )
        .unwrap();
    assert_eq!(sequences(&page), [9, 10]);
    assert_eq!(reader.deferred_chunks(), 2, "chunks 1-8 stay deferred");

    // Every request answers as the planner over a full load does, from any loading state.
    let storage = open_read(&layout);
    let (full, _) =
        annal_engine::index::load_index(&storage, &fixture_keys(), &reader_keys().index).unwrap();
    let key = fixture_key().session_id_key();
    for limit in [1u64, 4, 5, 8, 17, 32, 200] {
        for bounds in [
            (None, None),
            (Some(1), None),
            (None, Some(12)),
            (Some(5), Some(21)),
        ] {
            let mut value = serde_json::json!({ "limit": limit });
            if let Some(since) = bounds.0 {
                value["since_sequence"] = since.into();
            }
            if let Some(until) = bounds.1 {
                value["until_sequence"] = until.into();
            }
            let request = query(value);
            let want: Vec<u64> =
                annal_engine::query::plan(&request, &full, &key, RetentionCutoff::NONE)
                    .iter()
                    .map(|l| l.sequence)
                    .collect();
            let page = self::reader(&layout)
                .page(&request, RetentionCutoff::NONE, None)
                .unwrap();
            assert_eq!(sequences(&page), want, "{request:?}");
        }
    }
}

#[test]
fn a_deferred_chunk_that_no_longer_holds_what_its_seal_says_fails_closed_once_reached() {
    use annal_engine::query::RetentionCutoff;
    use annal_schema::ErrorCode;
    let (_dir, layout, s, _checkpoints) = sealed_store(2);
    // The oldest chunk keeps its length (so its seal still defers it), one record byte flips.
    let oldest = &s.closed[0];
    let path = chunk_path(&layout, oldest.chunk_id);
    let mut bytes = std::fs::read(&path).unwrap();
    let last = bytes.len() - 3;
    bytes[last] ^= 0x40;
    std::fs::write(&path, &bytes).unwrap();
    let mut reader = reader(&layout);
    assert_eq!(reader.deferred_chunks(), 7);
    // Pages that stay in newer chunks are answered (every event they return authenticates).
    let newest = reader
        .page(
            &query(serde_json::json!({"limit": 8})),
            RetentionCutoff::NONE,
            None,
        )
        .unwrap();
    assert_eq!(newest.events.len(), 8);
    // Reaching it is refused, never answered from the records before the damage...
    let all = reader.page(
        &query(serde_json::json!({"limit": 200})),
        RetentionCutoff::NONE,
        None,
    );
    assert_eq!(all.unwrap_err(), ErrorCode::HistoryStorageCorrupt);
    // ...and from then on every page fails closed until the owner repairs the store.
    let again = reader.page(
        &query(serde_json::json!({"limit": 1})),
        RetentionCutoff::NONE,
        None,
    );
    assert_eq!(again.unwrap_err(), ErrorCode::HistoryStorageCorrupt);
}

#[test]
fn a_writer_opening_past_sealed_chunks_continues_above_their_seals() {
    let (_dir, layout, s, _checkpoints) = sealed_store(1);
    // The unsealed newest chunk goes (as if it were never written): the sealed ones, which the
    // writer does not read, still hold the floor through their seals.
    let newest = s.locations.last().unwrap().chunk_id;
    std::fs::remove_file(chunk_path(&layout, newest)).unwrap();
    let storage = open_write(&layout);
    let sealed =
        annal_engine::seal::vouched_chunks(&read_seals(storage.as_ref(), &seal_key()).unwrap());
    assert_eq!(sealed.len(), 3);
    let mut writer =
        annal_engine::store::StoreWriter::<annal_engine::store::History>::open_skipping_sealed(
            Arc::clone(&storage),
            fixture_keys(),
            common::writer_config(),
            common::clock(),
            &sealed,
        )
        .unwrap();
    assert_eq!(writer.high_water().map(|s| s.get()), Some(12));
    let receipt = writer.append(fixture_drafts()[..1].to_vec()).unwrap();
    assert_eq!(
        receipt.records[0].sequence, 13,
        "never a sequence a sealed chunk holds"
    );
}
