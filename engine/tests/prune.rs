//! Physical pruning on real stores written by `StoreWriter<History>` and sealed as the Writer
//! actor seals them (four records per chunk, the fixture's events): what decides is the seal,
//! never a file's mtime; an unsealed chunk, or one no longer what its seal says, is never
//! recorded pruned; the journal's record comes first and `verify` reports a pruned chunk as
//! `pruned`. The crash and fault cases are in `fault_suite.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use annal_engine::journal::{Journal, JournalEntry, PruneReason};
use annal_engine::keys::{JournalKeys, KeyReference};
use annal_engine::profile::ChunkId;
use annal_engine::query::RetentionCutoff;
use annal_engine::seal::{ChunkFinding, Seal, read_seals, seal_chunk, seal_file_name};
use annal_engine::storage::{Storage, StoreLayout};
use annal_engine::store::{
    History, PrunePlan, Pruner, StoreWriter, WriterConfig, chunk_file_name, pruned_chunks,
};
use common::{
    fixture_drafts, fixture_key, fixture_keys, new_store, open_read, open_write, seal_key,
    verify_offline,
};

/// Records per chunk: the 16 fixture drafts fill four chunks, in time order.
const RECORDS_PER_CHUNK: u64 = 4;

fn journal_keys() -> JournalKeys {
    JournalKeys::from_namespace_root(&fixture_key())
}

/// A store whose writer appended the fixture drafts four at a time and sealed every chunk it
/// closed; the fourth chunk stays open (unsealed). Returns the seals, oldest first.
fn sealed_store() -> (tempfile::TempDir, StoreLayout, Vec<Seal>) {
    let (dir, layout) = new_store();
    let storage = open_write(&layout);
    let mut config = common::writer_config();
    config.max_records_per_chunk = RECORDS_PER_CHUNK;
    let mut writer = StoreWriter::<History>::open_with_entropy(
        Arc::clone(&storage),
        fixture_keys(),
        config,
        common::clock(),
        Box::new(annal_engine::entropy::SeededEntropy::new(11)),
    )
    .unwrap();
    let mut seals: Vec<Seal> = Vec::new();
    for batch in fixture_drafts().chunks(RECORDS_PER_CHUNK as usize) {
        let receipt = writer.append(batch.to_vec()).unwrap();
        writer.sync().unwrap();
        for closed in receipt.closed {
            let seal = seal_chunk(storage.as_ref(), &closed, seals.last(), &seal_key()).unwrap();
            seals.push(seal);
        }
    }
    assert_eq!(seals.len(), 3, "three closed chunks, the fourth open");
    (dir, layout, seals)
}

/// A cutoff just after `seal`'s last event: it and every older chunk are expired.
fn cutoff_after(seal: &Seal) -> RetentionCutoff {
    let day = Duration::from_secs(86_400);
    RetentionCutoff::new(seal.last_time + Duration::from_nanos(1) + day, 1)
}

fn pruner(storage: &Arc<dyn Storage>, recorded: &BTreeSet<ChunkId>) -> Pruner {
    let seals = read_seals(storage.as_ref(), &seal_key()).unwrap();
    Pruner::at_open(storage, &seals, recorded, &journal_keys()).unwrap()
}

fn chunks(plan: &PrunePlan) -> Vec<ChunkId> {
    plan.choices().iter().map(|c| c.chunk.chunk_id).collect()
}

fn chunk_path(layout: &StoreLayout, id: ChunkId) -> std::path::PathBuf {
    layout
        .history_root()
        .join("chunks")
        .join(chunk_file_name(id).as_str())
}

fn set_mtime(layout: &StoreLayout, id: ChunkId, to: SystemTime) {
    let file = std::fs::File::options()
        .write(true)
        .open(chunk_path(layout, id))
        .unwrap();
    file.set_modified(to).unwrap();
    assert_eq!(
        std::fs::metadata(chunk_path(layout, id))
            .unwrap()
            .modified()
            .unwrap(),
        to
    );
}

/// Appends `plan`'s records to the journal and syncs: what the Writer actor makes durable
/// before any file goes.
fn record(storage: &Arc<dyn Storage>, plan: &PrunePlan) {
    let mut journal = StoreWriter::<Journal>::open(
        Arc::clone(storage),
        journal_keys(),
        WriterConfig::new(
            KeyReference::new("fixture.history.v1").unwrap(),
            NonZeroU64::MIN,
        ),
        common::clock(),
    )
    .unwrap();
    let entries = plan
        .events()
        .into_iter()
        .map(|event| JournalEntry { time_ms: 1, event })
        .collect();
    journal.append(entries).unwrap();
    journal.sync().unwrap();
}

#[test]
fn the_seal_decides_and_a_files_mtime_changes_nothing() {
    let (_dir, layout, seals) = sealed_store();
    let storage = open_write(&layout);
    let cutoff = cutoff_after(&seals[1]);
    let untouched = pruner(&storage, &BTreeSet::new()).plan(None, cutoff, None);
    assert_eq!(chunks(&untouched), [seals[0].chunk_id, seals[1].chunk_id]);
    assert!(
        untouched
            .choices()
            .iter()
            .all(|c| c.reason == PruneReason::Retention)
    );
    // The expired chunks look brand new, the kept one ancient: nothing changes.
    let future = SystemTime::now() + Duration::from_secs(10 * 365 * 86_400);
    let past = SystemTime::UNIX_EPOCH + Duration::from_secs(1);
    set_mtime(&layout, seals[0].chunk_id, future);
    set_mtime(&layout, seals[1].chunk_id, future);
    set_mtime(&layout, seals[2].chunk_id, past);
    let mut after = pruner(&storage, &BTreeSet::new());
    let plan = after.plan(None, cutoff, None);
    assert_eq!(plan, untouched);
    let plan = after.confirm_on_disk(storage.as_ref(), plan);
    assert_eq!(plan, untouched, "the files still have their seals' lengths");
    // The seal's time decides, in the other direction too: a cutoff before every record prunes
    // nothing however old the files look.
    set_mtime(&layout, seals[0].chunk_id, past);
    let none = pruner(&storage, &BTreeSet::new()).plan(None, cutoff_after_nothing(), None);
    assert!(none.is_empty());
    // And the chunk the writer is appending to is never chosen, even named as a sealed one.
    let open = pruner(&storage, &BTreeSet::new()).plan(Some(seals[0].chunk_id), cutoff, None);
    assert_eq!(chunks(&open), [seals[1].chunk_id]);
}

/// A cutoff before the fixture's first event.
fn cutoff_after_nothing() -> RetentionCutoff {
    RetentionCutoff::new(Duration::from_secs(1_000_000_000), 1)
}

#[test]
fn an_unsealed_chunk_or_one_changed_since_its_seal_is_never_recorded_pruned() {
    let (_dir, layout, seals) = sealed_store();
    let storage = open_write(&layout);
    let everything = cutoff_after(&seals[2]);
    // The newest chunk is open (no seal) and every record in it is as old as the others: it is
    // never a candidate.
    let plan = pruner(&storage, &BTreeSet::new()).plan(None, everything, None);
    assert_eq!(
        chunks(&plan),
        seals.iter().map(|s| s.chunk_id).collect::<Vec<_>>()
    );
    // A seal that no longer verifies vouches for nothing: its chunk is no candidate either.
    let seal_path = layout
        .sidecar()
        .unwrap()
        .join("seals")
        .join(seal_file_name(seals[2].chunk_id).as_str());
    let mut bytes = std::fs::read(&seal_path).unwrap();
    bytes[3] ^= 0x01;
    std::fs::write(&seal_path, &bytes).unwrap();
    let mut pruner_now = pruner(&storage, &BTreeSet::new());
    let plan = pruner_now.plan(None, everything, None);
    assert_eq!(chunks(&plan), [seals[0].chunk_id, seals[1].chunk_id]);
    // Checked on disk just before the record: a chunk already gone (a deletion verify must
    // report as missing) and one longer than its seal (replaced) are dropped, not recorded.
    std::fs::remove_file(chunk_path(&layout, seals[0].chunk_id)).unwrap();
    let mut longer = std::fs::OpenOptions::new()
        .append(true)
        .open(chunk_path(&layout, seals[1].chunk_id))
        .unwrap();
    std::io::Write::write_all(&mut longer, &[0]).unwrap();
    drop(longer);
    let plan = pruner_now.confirm_on_disk(storage.as_ref(), plan);
    assert!(plan.is_empty(), "{plan:?}");
    assert!(
        pruner_now.plan(None, everything, None).is_empty(),
        "forgotten"
    );
}

#[test]
fn the_record_comes_first_and_verify_reports_a_pruned_chunk_as_pruned() {
    let (_dir, layout, seals) = sealed_store();
    let storage = open_write(&layout);
    let cutoff = cutoff_after(&seals[0]);
    let mut pruner_now = pruner(&storage, &BTreeSet::new());
    let plan = pruner_now.plan(None, cutoff, None);
    let plan = pruner_now.confirm_on_disk(storage.as_ref(), plan);
    assert_eq!(chunks(&plan), [seals[0].chunk_id]);
    // Recorded, then (as if the process died here) not yet removed: verify finds the chunk as
    // it always was, and a writer opening now finds it pending.
    record(&storage, &plan);
    pruner_now.recorded(plan);
    let recorded = pruned_chunks(&storage, &journal_keys()).unwrap();
    assert_eq!(recorded, BTreeSet::from([seals[0].chunk_id]));
    let read = open_read(&layout);
    let report = verify_offline(&read).with_pruned(&recorded);
    assert!(report.is_clean(), "{report:#?}");
    let mut reopened = pruner(&storage, &recorded);
    assert_eq!(reopened.pending(), [seals[0].chunk_id]);
    assert!(
        reopened.plan(None, cutoff, None).is_empty(),
        "never recorded twice"
    );
    // The next open removes it: the chunk and its index file go, its seal stays.
    let index = layout
        .sidecar()
        .unwrap()
        .join("index")
        .join(format!("{}.idx", seals[0].chunk_id.to_hex()));
    std::fs::write(&index, b"derived").unwrap();
    assert_eq!(
        reopened.remove_recorded(storage.as_ref()).unwrap(),
        [seals[0].chunk_id]
    );
    assert!(reopened.pending().is_empty());
    assert!(!chunk_path(&layout, seals[0].chunk_id).exists());
    assert!(!index.exists());
    let report = verify_offline(&read);
    // Without the journal's word the chunk is missing; with it, pruned, and the store clean.
    let missing: Vec<&ChunkFinding> = report.findings().map(|(_, f)| f).collect();
    assert_eq!(missing, [&ChunkFinding::Missing { ordinal: 1 }]);
    assert!(!report.is_clean());
    let told = report.with_pruned(&recorded);
    let pruned: Vec<&ChunkFinding> = told.findings().map(|(_, f)| f).collect();
    assert_eq!(pruned, [&ChunkFinding::Pruned { ordinal: 1 }]);
    assert!(told.is_clean(), "{told:#?}");
    // A chunk deleted without a record stays missing, pruned set or not.
    std::fs::remove_file(chunk_path(&layout, seals[1].chunk_id)).unwrap();
    let report = verify_offline(&read).with_pruned(&recorded);
    assert!(!report.is_clean());
    assert!(
        report
            .findings()
            .any(|(_, f)| *f == ChunkFinding::Missing { ordinal: 2 })
    );
}
