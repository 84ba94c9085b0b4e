//! The fault-injection suite over the `Storage` seam: a realistic workload (history appends with
//! rotation, seals, index files, journal records, a quarantine, then retention and eviction
//! pruning the oldest sealed chunks) runs once to count its I/O operations; then, at every operation of every kind in turn, one fault is injected (a failed
//! write, a short write, a failed sync that drops the page cache, ENOSPC, a failed create, rename
//! or directory sync), the workload goes on, the machine "crashes" keeping a seeded prefix of
//! every unsynced byte, and the store is read again. Invariants, per case:
//!
//! - every record a sync acknowledged reads back, with its exact content;
//! - a failed append accounts for every sequence of its batch and of the batches waiting for a
//!   sync: durable (a chunk it closed, or the salvage) or reported lost, never both;
//! - the writer never reports durable more than it synced (the read store holds a contiguous
//!   prefix of sequences per stream, each at or beyond every acknowledgment);
//! - no byte position of any file is written twice (`FaultyStorage::rewrites`): no record is
//!   ever encrypted twice under one chunk key and IV;
//! - every failure is reported with a health category while it lasts, and the writer recovers
//!   (the next batch after the fault is acknowledged);
//! - `verify` reports nothing but torn tails, and `unsealed` only for a chunk whose seal the
//!   fault stopped;
//! - pruning never loses a chunk it should keep: a chunk file is gone only if the journal on
//!   disk records it pruned, and only a chunk the plan chose is ever recorded; told the
//!   journal's pruned set, `verify` reports such a chunk `pruned`, never `missing`. Every other
//!   case crashes right after the prune's record and before any removal; there, and after the
//!   next open completes the removal, `verify` stays clean the same way;
//! - a writer opened afterwards (above the journal's high-water mark) hands out no sequence
//!   ever acknowledged, pruned or not.
//!
//! Then the import (`store::import::Importer`) runs the same way at each of its own operations,
//! and against a credential store that fails when its key is made
//! (`FIGURE fault.import.cases`, `fault.import.cases_injected`; see `import_faults`).
//!
//! A `harness = false` target: it prints `FIGURE fault.cases_injected N`. `FAULT_CASES` bounds
//! the CI run; `ANNAL_FAULT_CASES=100000 cargo test --release -p annal-engine --test
//! fault_suite` runs every case there is; `ANNAL_FAULT_SEED` replays one run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use annal_engine::entropy::SeededEntropy;
use annal_engine::index::{IndexKey, chunk_index_of, write_index_file};
use annal_engine::journal::{Journal, JournalEntry, JournalEvent, PruneReason, State};
use annal_engine::keys::{JournalKeys, KeyReference, Namespace};
use annal_engine::profile::ChunkId;
use annal_engine::query::RetentionCutoff;
use annal_engine::seal::{SealKey, prepare_seal, read_seals, verify, write_seal};
use annal_engine::storage::{Access, Area, FaultKind, FaultOp, FaultyStorage, Storage};
use annal_engine::store::import::{ImportError, Importer};
use annal_engine::store::{
    Eviction, History, Pruner, StoreReader, StoreWriter, WriterConfig, open_store, pruned_chunks,
    quarantine_chunk,
};
use annal_schema::EventDraft;
use common::{fixture_drafts, fixture_key, fixture_keys, new_store};

/// Cases in one CI run (each is a fresh store, a workload, a crash and a full read).
const FAULT_CASES: usize = 400;

/// Batches of the workload (three fixture drafts each, four records per chunk: batches straddle
/// chunks, so a fault may fail a batch after part of it went into a chunk the append closed).
const WORKLOAD_BATCHES: usize = 10;

/// Drafts in one workload batch.
const BATCH_DRAFTS: usize = 3;

/// One injected fault.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// The `nth` operation `op` fails with `kind`.
    Fail {
        op: FaultOp,
        nth: u64,
        kind: FaultKind,
    },
    /// The `nth` write keeps `keep` bytes, then fails.
    ShortWrite { nth: u64, keep: u64 },
    /// From the `nth` write on, every write hits a full disk until cleared.
    DiskFull { nth: u64 },
}

/// Where a fault is armed: at the start of the workload (counted over all of it; the disk
/// recovers before its last two batches), or at the start of the prune phase (counted over that
/// phase only, and never cleared before the crash).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// From the workload's first operation.
    Workload,
    /// From the prune phase's first operation.
    Prune,
}

/// Every operation kind the suite counts and faults.
const OPS: [FaultOp; 5] = [
    FaultOp::Create,
    FaultOp::Write,
    FaultOp::Sync,
    FaultOp::Rename,
    FaultOp::SyncDir,
];

fn arm(storage: &FaultyStorage, fault: Fault) {
    match fault {
        Fault::Fail { op, nth, kind } => storage.fail_nth(op, nth, kind),
        Fault::ShortWrite { nth, keep } => storage.short_write_nth(nth, keep, FaultKind::Eio),
        Fault::DiskFull { nth } => storage.fail_from_nth(FaultOp::Write, nth, FaultKind::NoSpace),
    }
}

/// What one workload run saw.
#[derive(Default)]
struct Run {
    /// Acknowledged records: sequence -> (its chunk, its content).
    acknowledged: BTreeMap<u64, (ChunkId, EventDraft)>,
    /// Errors seen, each with a health category.
    failures: u64,
    /// An error without a health category.
    uncategorized: Vec<String>,
    /// Loss accounting broken by a failed append: a sequence of the batch or of an earlier
    /// unsynced one that is neither durable nor reported lost, or one reported lost though
    /// durable.
    misaccounted: Vec<String>,
    /// Whether a seal or index write failed (a chunk may then be unsealed).
    seal_failed: bool,
    /// Whether the batch after the fault was cleared was acknowledged.
    recovered: bool,
    /// The chunks the prune phase chose, and why (only these may ever be recorded pruned).
    planned: BTreeMap<ChunkId, PruneReason>,
    /// The highest sequence ever acknowledged (whatever was pruned since).
    highest_acknowledged: u64,
    /// Operations of each kind the prune phase did.
    prune_ops: Vec<(FaultOp, u64)>,
}

fn writer(storage: &FaultyStorage, seed: u64) -> Option<StoreWriter<History>> {
    let mut config = common::writer_config();
    config.max_records_per_chunk = 4;
    StoreWriter::<History>::open_with_entropy(
        Arc::new(storage.clone()),
        fixture_keys(),
        config,
        common::clock(),
        Box::new(SeededEntropy::new(seed)),
    )
    .ok()
}

/// The workload, with `fault` armed in its phase (or none, to count operations). With
/// `crash_before_removal`, the prune phase stops right after its journal record, as a crash
/// there would.
fn workload(
    storage: &FaultyStorage,
    fault: Option<(Phase, Fault)>,
    seed: u64,
    crash_before_removal: bool,
) -> Run {
    let mut run = Run::default();
    if let Some((Phase::Workload, fault)) = fault {
        arm(storage, fault);
    }
    let dyn_storage: Arc<dyn Storage> = Arc::new(storage.clone());
    let seal_key = SealKey::from_purpose_key(&fixture_key().seal_key());
    let index_key = IndexKey::new(&fixture_key().index_key());
    let journal_keys = JournalKeys::from_namespace_root(&fixture_key());
    let reference = KeyReference::new("fixture.history.v1").unwrap();
    let mut journal = StoreWriter::<Journal>::open(
        Arc::clone(&dyn_storage),
        journal_keys.clone(),
        WriterConfig::new(reference.clone(), NonZeroU64::MIN),
        common::clock(),
    )
    .ok();
    let drafts = fixture_drafts();
    let mut history = writer(storage, seed);
    let mut tip = None;
    let mut pending: Vec<(u64, ChunkId, EventDraft)> = Vec::new();
    let mut closed_ids = Vec::new();
    for batch_index in 0..WORKLOAD_BATCHES {
        if batch_index == WORKLOAD_BATCHES - 2 {
            // The disk recovered: what comes now must be acknowledged again.
            storage.clear_faults();
        }
        let batch: Vec<EventDraft> = (0..BATCH_DRAFTS)
            .map(|k| drafts[(batch_index * BATCH_DRAFTS + k) % drafts.len()].clone())
            .collect();
        let Some(w) = history.as_mut() else {
            history = writer(storage, seed + batch_index as u64 + 1);
            run.failures += 1;
            continue;
        };
        let first = w.next_sequence().unwrap().get();
        let batch_len = batch.len() as u64;
        match w.append(batch.clone()) {
            Ok(receipt) => {
                for (location, draft) in receipt.records.iter().zip(batch) {
                    pending.push((location.sequence, location.chunk_id, draft));
                }
                for closed in receipt.closed {
                    closed_ids.push(closed.chunk_id);
                    // As the Writer actor does: the next seal chains to this one whether or not
                    // its file could be written (a failed write leaves the chunk unsealed).
                    match prepare_seal(&closed, tip.as_ref()) {
                        Ok(seal) => {
                            if write_seal(storage, &closed, &seal, &seal_key).is_err() {
                                run.seal_failed = true;
                            }
                            tip = Some(seal);
                        }
                        Err(_) => run.seal_failed = true,
                    }
                }
            }
            Err(error) => {
                run.failures += 1;
                if error.health_category().is_none() {
                    run.uncategorized.push(error.to_string());
                }
                // Exact accounting: every sequence of this batch and of those waiting for a
                // sync is durable now (a chunk the append closed, or the salvage) or reported
                // lost, never both.
                let durable = w.durable_through().map_or(0, |d| d.get());
                let lost = error.lost();
                let waiting = pending.iter().map(|(sequence, _, _)| *sequence);
                let abandoned = !error.is_refused();
                for sequence in waiting
                    .chain(first..first + batch_len)
                    .filter(|_| abandoned)
                {
                    let reported = lost.is_some_and(|range| range.contains(&sequence));
                    if reported == (sequence <= durable) {
                        run.misaccounted.push(format!(
                            "{sequence}: durable through {durable}, lost {lost:?} ({error})"
                        ));
                    }
                }
                // What is lost is never acknowledged by a later, higher durable mark.
                pending.retain(|(sequence, _, _)| !lost.is_some_and(|r| r.contains(sequence)));
            }
        }
        // Every other batch waits for the next one's sync (a group commit of two), so a fault
        // can meet batches appended and not yet synced; the last two always sync.
        let sync_now = batch_index % 2 == 1 || batch_index >= WORKLOAD_BATCHES - 2;
        let synced = if sync_now { w.sync() } else { Ok(None) };
        match synced {
            Ok(Some(durable)) => {
                let acked_now = pending.iter().any(|(s, _, _)| *s <= durable.get());
                for (sequence, chunk, draft) in pending.drain(..) {
                    if sequence <= durable.get() {
                        run.acknowledged.insert(sequence, (chunk, draft));
                    }
                }
                if batch_index == WORKLOAD_BATCHES - 1 && acked_now {
                    run.recovered = true;
                }
            }
            Ok(None) => {}
            Err(error) => {
                // The error names what it lost: everything not yet acknowledged. A later
                // durable mark above those sequences does not bring them back.
                pending.clear();
                run.failures += 1;
                if error.health_category().is_none() {
                    run.uncategorized.push(error.to_string());
                }
            }
        }
        if let Some(j) = journal.as_mut() {
            let mut entries = vec![JournalEntry {
                time_ms: 1,
                event: JournalEvent::DropsRecorded { count: 1 },
            }];
            // The history stream's high-water mark, as the Writer actor reserves it.
            if let Some(high_water) = history.as_ref().and_then(|w| w.high_water()) {
                entries.push(JournalEntry {
                    time_ms: 1,
                    event: JournalEvent::SequenceMarked {
                        high_water: high_water.get(),
                        boot: None,
                        in_flight_max: None,
                    },
                });
            }
            if j.append(entries).is_err() || j.sync().is_err() {
                run.failures += 1;
            }
        }
    }
    run.highest_acknowledged = run.acknowledged.keys().next_back().copied().unwrap_or(0);
    drop(history);
    drop(journal);
    // The derived index of every closed chunk, then a quarantine of the oldest.
    if let Ok(report) = StoreReader::<History>::new(Arc::clone(&dyn_storage)).read(&fixture_keys())
    {
        for chunk in &report.chunks {
            if let Some(index) = chunk_index_of(chunk)
                && write_index_file(storage, &index_key, &index).is_err()
            {
                run.seal_failed = true;
            }
        }
    }
    if let Some(oldest) = closed_ids.first() {
        // Quarantine is the owner's repair: the chunk's records leave the readable history
        // once it is out of `chunks/` (whether or not its tombstone was recorded).
        let _ = quarantine_chunk(
            &dyn_storage,
            *oldest,
            &journal_keys,
            &reference,
            common::clock(),
        );
        let name = annal_engine::store::chunk_file_name(*oldest);
        if storage.open_read(Area::Chunks, &name).is_err() {
            run.acknowledged.retain(|_, (chunk, _)| chunk != oldest);
        }
    }
    let before: Vec<u64> = OPS.iter().map(|op| storage.count(*op)).collect();
    if let Some((Phase::Prune, fault)) = fault {
        arm(storage, fault);
    }
    prune(
        storage,
        &journal_keys,
        &reference,
        crash_before_removal,
        &mut run,
    );
    run.prune_ops = OPS
        .iter()
        .zip(before)
        .map(|(op, before)| (*op, storage.count(*op) - before))
        .collect();
    run
}

/// Bytes of every chunk file (history and journal), as the Writer actor counts them against
/// the quota.
fn store_bytes(storage: &dyn Storage) -> u64 {
    [Area::Chunks, Area::Journal]
        .into_iter()
        .flat_map(|area| {
            storage
                .list(area)
                .unwrap_or_default()
                .into_iter()
                .filter_map(move |e| e.file_name().map(|name| (area, name)))
        })
        .filter_map(|(area, name)| storage.open_read(area, &name).ok().map(|f| f.len()))
        .sum()
}

/// Retention and eviction as the Writer actor runs them: the pruner from the seals and the
/// journal, a cutoff just after the oldest sealed chunk's last event (it, and any chunk no
/// newer, goes by retention), the store past a quota of two thirds of it with `evict_oldest`
/// (the oldest others go until it is at the low-water mark); the records durable in the
/// journal, and only then the files removed.
fn prune(
    storage: &FaultyStorage,
    journal_keys: &JournalKeys,
    reference: &KeyReference,
    crash_before_removal: bool,
    run: &mut Run,
) {
    let dyn_storage: Arc<dyn Storage> = Arc::new(storage.clone());
    let seal_key = SealKey::from_purpose_key(&fixture_key().seal_key());
    let (Ok(seals), Ok(report)) = (
        read_seals(storage, &seal_key),
        StoreReader::<Journal>::new(Arc::clone(&dyn_storage)).read(journal_keys),
    ) else {
        run.failures += 1;
        return;
    };
    let state = State::replay(report.records().map(|r| &r.event.event));
    let Ok(mut pruner) = Pruner::at_open(&dyn_storage, &seals, &state.pruned, journal_keys) else {
        run.failures += 1;
        return;
    };
    let Some(oldest) = pruner.candidates().min_by_key(|c| c.last_sequence).copied() else {
        return;
    };
    let day = Duration::from_secs(86_400);
    let cutoff = RetentionCutoff::new(oldest.last_time + Duration::from_nanos(1) + day, 1);
    let used = store_bytes(storage);
    let eviction = Eviction {
        used_bytes: used,
        quota_bytes: used / 3 * 2,
    };
    let plan = pruner.plan(None, cutoff, Some(eviction));
    let plan = pruner.confirm_on_disk(storage, plan);
    run.planned = plan
        .choices()
        .iter()
        .map(|c| (c.chunk.chunk_id, c.reason))
        .collect();
    let entries: Vec<JournalEntry> = plan
        .events()
        .into_iter()
        .map(|event| JournalEntry { time_ms: 1, event })
        .collect();
    let recorded = StoreWriter::<Journal>::open_after_read(
        Arc::clone(&dyn_storage),
        journal_keys.clone(),
        WriterConfig::new(reference.clone(), NonZeroU64::MIN),
        common::clock(),
        &report,
    )
    .map_err(|e| e.to_string())
    .and_then(|mut journal| {
        journal.append(entries).map_err(|e| e.to_string())?;
        journal.sync().map_err(|e| e.to_string())
    });
    if recorded.is_err() {
        // Not recorded: nothing may go.
        run.failures += 1;
        return;
    }
    pruner.recorded(plan);
    if crash_before_removal {
        return;
    }
    if pruner.remove_recorded(storage).is_err() {
        run.failures += 1;
    }
}

/// `verify`'s findings, told the journal's pruned set, against what the run allows.
fn check_verify(read: &Arc<dyn Storage>, pruned: &BTreeSet<ChunkId>, run: &Run, case: &str) {
    let seal_key = SealKey::from_purpose_key(&fixture_key().seal_key());
    let verified = verify(
        read,
        &fixture_keys(),
        &seal_key,
        annal_engine::seal::CheckpointReading::NotConsulted,
    )
    .unwrap()
    .with_pruned(pruned);
    for chunk in &verified.chunks {
        for finding in &chunk.findings {
            let name = finding.as_str();
            let allowed = matches!(name, "ok" | "torn_tail" | "quarantined" | "pruned")
                || (name == "unsealed" && (run.seal_failed || run.failures > 0));
            assert!(
                allowed,
                "{case}: verify found {name} in {}",
                chunk.file_name
            );
        }
    }
    let store_findings: Vec<&str> = verified.store.iter().map(|f| f.as_str()).collect();
    for name in &store_findings {
        // A seal that could not be written leaves a gap in the chain; nothing else may appear.
        assert!(
            *name == "chain_gap" && run.seal_failed,
            "{case}: verify found {name}"
        );
    }
}

fn check(
    storage: &FaultyStorage,
    layout: &annal_engine::storage::StoreLayout,
    run: &Run,
    case: &str,
) {
    assert_eq!(
        storage.rewrites(),
        0,
        "{case}: a byte position was written twice"
    );
    assert!(
        run.uncategorized.is_empty(),
        "{case}: {:?}",
        run.uncategorized
    );
    assert!(
        run.misaccounted.is_empty(),
        "{case}: {:?}",
        run.misaccounted
    );
    assert!(
        run.recovered,
        "{case}: the writer did not recover after the fault cleared"
    );
    let read: Arc<dyn Storage> = Arc::new(open_store(layout, Access::Read).unwrap());
    let journal_keys = JournalKeys::from_namespace_root(&fixture_key());
    // What the journal on disk records as pruned: only chunks the plan chose, and the only
    // chunks whose acknowledged records may be gone.
    let pruned = pruned_chunks(&read, &journal_keys).unwrap();
    assert!(
        pruned.iter().all(|chunk| run.planned.contains_key(chunk)),
        "{case}: recorded pruned {pruned:?}, planned {:?}",
        run.planned
    );
    let report = StoreReader::<History>::new(Arc::clone(&read))
        .read(&fixture_keys())
        .unwrap();
    let by_sequence: BTreeMap<u64, EventDraft> = report
        .records()
        .map(|r| (r.event.data.sequence.get(), r.event.to_draft()))
        .collect();
    for (sequence, (_, draft)) in run
        .acknowledged
        .iter()
        .filter(|(_, (chunk, _))| !pruned.contains(chunk))
    {
        match by_sequence.get(sequence) {
            Some(found) => assert_eq!(found, draft, "{case}: record {sequence} changed"),
            None => panic!(
                "{case}: acknowledged record {sequence} lost (read: {:?})",
                by_sequence.keys().collect::<Vec<_>>()
            ),
        }
    }
    check_verify(&read, &pruned, run, case);

    // The next open completes what a crash left recorded but not removed, and verify stays
    // clean; no recorded chunk's file remains.
    storage.clear_faults();
    let write: Arc<dyn Storage> = Arc::new(storage.clone());
    let seal_key = SealKey::from_purpose_key(&fixture_key().seal_key());
    let seals = read_seals(storage, &seal_key).unwrap();
    let mut pruner = Pruner::at_open(&write, &seals, &pruned, &journal_keys).unwrap();
    pruner.remove_recorded(storage).unwrap();
    assert!(pruner.pending().is_empty(), "{case}");
    for chunk in &pruned {
        let name = annal_engine::store::chunk_file_name(*chunk);
        assert!(
            storage.open_read(Area::Chunks, &name).is_err(),
            "{case}: pruned {name} still there"
        );
    }
    check_verify(&read, &pruned, run, case);

    // A writer opened above the journal's mark hands out no sequence ever acknowledged.
    let journal = StoreReader::<Journal>::new(Arc::clone(&read))
        .read(&journal_keys)
        .unwrap();
    let state = State::replay(journal.records().map(|r| &r.event.event));
    let mut config = common::writer_config();
    config.sequence_floor = state
        .history_high_water
        .and_then(annal_schema::Sequence::new);
    let mut next = StoreWriter::<History>::open_with_entropy(
        write,
        fixture_keys(),
        config,
        common::clock(),
        Box::new(SeededEntropy::new(0xa11)),
    )
    .unwrap();
    let receipt = next.append(fixture_drafts()[..1].to_vec()).unwrap();
    assert!(
        receipt.records[0].sequence > run.highest_acknowledged,
        "{case}: sequence {} reused (acknowledged up to {})",
        receipt.records[0].sequence,
        run.highest_acknowledged
    );
}

fn main() {
    if !annal_engine::test_support::suite_selected("fault_suite") {
        return;
    }
    let limit = annal_engine::test_support::env_parsed("ANNAL_FAULT_CASES").unwrap_or(FAULT_CASES);
    let seed =
        annal_engine::test_support::env_parsed("ANNAL_FAULT_SEED").unwrap_or(0x5eed_fa17_u64);
    println!("fault suite: seed {seed} (ANNAL_FAULT_SEED={seed} replays it)");

    // Count the workload's operations without a fault.
    let (_dir, layout) = new_store();
    let storage = FaultyStorage::new(open_store(&layout, Access::Write).unwrap());
    let clean = workload(&storage, None, seed, false);
    assert!(
        clean.failures == 0 && clean.recovered,
        "the clean workload failed"
    );
    // The prune phase is not vacuous: retention and eviction each take a chunk, and the files
    // are gone.
    for reason in [PruneReason::Retention, PruneReason::EvictOldest] {
        assert!(
            clean.planned.values().any(|r| *r == reason),
            "the clean workload pruned nothing by {reason:?}: {:?}",
            clean.planned
        );
    }
    for chunk in clean.planned.keys() {
        let name = annal_engine::store::chunk_file_name(*chunk);
        assert!(storage.open_read(Area::Chunks, &name).is_err());
    }
    let counts: Vec<(FaultOp, u64)> = OPS.into_iter().map(|op| (op, storage.count(op))).collect();
    println!(
        "fault suite: the workload does {counts:?} operations, its prune phase {:?}",
        clean.prune_ops
    );
    drop(storage);

    let mut rng = SeededEntropy::new(seed | 1);
    let mut faults = Vec::new();
    for (phase, counts) in [(Phase::Workload, &counts), (Phase::Prune, &clean.prune_ops)] {
        for (op, count) in counts {
            for nth in 1..=*count {
                faults.push((
                    phase,
                    Fault::Fail {
                        op: *op,
                        nth,
                        kind: FaultKind::Eio,
                    },
                ));
                if matches!(op, FaultOp::Write | FaultOp::Create) {
                    faults.push((
                        phase,
                        Fault::Fail {
                            op: *op,
                            nth,
                            kind: FaultKind::NoSpace,
                        },
                    ));
                }
                if *op == FaultOp::Write {
                    faults.push((
                        phase,
                        Fault::ShortWrite {
                            nth,
                            keep: rng.next_u64() % 64,
                        },
                    ));
                    faults.push((phase, Fault::DiskFull { nth }));
                }
            }
        }
    }
    // Spread a bounded run over every kind and position.
    let stride = faults.len().div_ceil(limit.max(1)).max(1);
    let mut injected = 0u64;
    let mut cases = 0usize;
    let only: Option<usize> = annal_engine::test_support::env_parsed("ANNAL_FAULT_ONLY");
    for (index, fault) in faults
        .iter()
        .enumerate()
        .filter(|(i, _)| i % stride == 0 && only.is_none_or(|o| o == *i))
    {
        let case = format!("case {index} {fault:?} (seed {seed})");
        let (_dir, layout) = new_store();
        let storage = FaultyStorage::new(open_store(&layout, Access::Write).unwrap());
        // Every other case crashes between the prune's record and its removal.
        let run = workload(&storage, Some(*fault), seed, index % 2 == 1);
        injected += storage.injected();
        let crash_seed = rng.next_u64();
        let mut crash_rng = SeededEntropy::new(crash_seed | 1);
        storage
            .crash(&mut |unsynced| crash_rng.next_u64() % (unsynced + 1))
            .unwrap();
        let result = std::panic::catch_unwind(|| check(&storage, &layout, &run, &case));
        if result.is_err() {
            eprintln!("fault suite FAILED at {case}: rerun with ANNAL_FAULT_SEED={seed}");
            std::process::exit(1);
        }
        cases += 1;
    }
    println!(
        "fault suite: {cases} cases of {} (every kind at every operation), {injected} faults injected",
        faults.len()
    );
    println!("FIGURE fault.cases_injected {injected} faults");
    println!("FIGURE fault.cases {cases} cases");
    import_faults(seed, limit);
}

/// A credential-store fault armed on the new store's key reference.
type KeyFault = fn(&annal_engine::keys::InMemoryProvider, &Namespace, &KeyReference);

/// The events an import writes: a store's whole history of two writer generations (two
/// streams), read back.
fn import_source() -> Vec<annal_schema::Event> {
    let (_dir, layout) = new_store();
    let storage = FaultyStorage::new(open_store(&layout, Access::Write).unwrap());
    for seed in [1, 2] {
        let mut w = writer(&storage, seed).unwrap();
        w.append(fixture_drafts()).unwrap();
        w.sync().unwrap();
    }
    let report = StoreReader::<History>::new(Arc::new(storage))
        .read(&fixture_keys())
        .unwrap();
    report.records().map(|r| r.event.clone()).collect()
}

/// One import into a fresh store under `storage` (a new namespace's key in `provider`), with
/// 30 days of retention journaled: what `Importer` reported.
fn import_into(
    storage: &FaultyStorage,
    layout: &annal_engine::storage::StoreLayout,
    provider: &annal_engine::keys::InMemoryProvider,
    events: &[annal_schema::Event],
) -> Result<u64, ImportError> {
    let namespace = Namespace::new("imported").unwrap();
    let scope = annal_engine::store::key_scope(layout).unwrap();
    let mut importer = Importer::open(
        Arc::new(storage.clone()),
        provider,
        &namespace,
        &scope,
        common::clock(),
    )?;
    for event in events {
        importer.push(event.clone())?;
    }
    importer.finish(Some(30))
}

/// The chunks' key references, and the history read with the key the provider holds for the
/// store (none when it holds none).
fn imported(
    storage: &FaultyStorage,
    layout: &annal_engine::storage::StoreLayout,
    provider: &annal_engine::keys::InMemoryProvider,
) -> (BTreeSet<KeyReference>, Option<Vec<annal_schema::Event>>) {
    let namespace = Namespace::new("imported").unwrap();
    let scope = annal_engine::store::key_scope(layout).unwrap();
    let custody = annal_engine::keys::open_store_key(
        provider,
        &namespace,
        &scope,
        annal_engine::keys::OpenMode::Read,
    )
    .ok();
    let events = custody.map(|custody| {
        StoreReader::<History>::new(Arc::new(storage.clone()))
            .read(&custody.history_keys())
            .unwrap()
            .records()
            .map(|r| r.event.clone())
            .collect()
    });
    (scope.named, events)
}

/// The import under faults (issue 34 item 5): at every storage operation of a clean import in
/// turn, one fault (a failed or short write, ENOSPC, a failed create, sync, rename or
/// directory sync), then a crash keeping a seeded prefix of every unsynced byte; and a
/// credential store that fails, or does not keep what it was given, when the key is made.
/// Invariants: an import that reported success reads back whole and byte for byte after the
/// crash; one that failed said so (the caller throws the store away); no byte position is
/// written twice; and never a chunk under a key the credential store does not hold.
fn import_faults(seed: u64, limit: usize) {
    let events = import_source();
    assert!(events.len() >= 2 * fixture_drafts().len());
    let provider =
        || annal_engine::keys::InMemoryProvider::new(Box::new(SeededEntropy::new(seed))).unwrap();

    let (_dir, layout) = new_store();
    let storage = FaultyStorage::new(open_store(&layout, Access::Write).unwrap());
    let keys = provider();
    assert_eq!(
        import_into(&storage, &layout, &keys, &events).unwrap(),
        events.len() as u64
    );
    let counts: Vec<(FaultOp, u64)> = OPS.into_iter().map(|op| (op, storage.count(op))).collect();
    // Reported whole, it survives a crash right after: everything it wrote was synced.
    let mut crash_rng = SeededEntropy::new(seed | 5);
    storage
        .crash(&mut |unsynced| crash_rng.next_u64() % (unsynced + 1))
        .unwrap();
    let (_, read) = imported(&storage, &layout, &keys);
    let read = read.unwrap();
    assert_eq!(read.len(), events.len());
    for (a, b) in read.iter().zip(&events) {
        assert_eq!(a.to_json_vec(), b.to_json_vec());
    }
    drop(storage);

    let mut faults = Vec::new();
    for (op, count) in &counts {
        for nth in 1..=*count {
            faults.push(Fault::Fail {
                op: *op,
                nth,
                kind: FaultKind::Eio,
            });
            if matches!(op, FaultOp::Write | FaultOp::Create) {
                faults.push(Fault::Fail {
                    op: *op,
                    nth,
                    kind: FaultKind::NoSpace,
                });
            }
            if *op == FaultOp::Write {
                faults.push(Fault::ShortWrite {
                    nth,
                    keep: nth % 64,
                });
            }
        }
    }
    let stride = faults.len().div_ceil(limit.max(1)).max(1);
    let mut rng = SeededEntropy::new(seed | 3);
    let (mut cases, mut injected, mut succeeded) = (0usize, 0u64, 0usize);
    for (index, fault) in faults.iter().enumerate().filter(|(i, _)| i % stride == 0) {
        let case = format!("import case {index} {fault:?} (seed {seed})");
        let (_dir, layout) = new_store();
        let storage = FaultyStorage::new(open_store(&layout, Access::Write).unwrap());
        let keys = provider();
        arm(&storage, *fault);
        let result = import_into(&storage, &layout, &keys, &events);
        injected += storage.injected();
        let mut crash_rng = SeededEntropy::new(rng.next_u64() | 1);
        storage
            .crash(&mut |unsynced| crash_rng.next_u64() % (unsynced + 1))
            .unwrap();
        assert_eq!(
            storage.rewrites(),
            0,
            "{case}: a byte position was written twice"
        );
        let (named, read) = imported(&storage, &layout, &keys);
        // Never a chunk under a key the credential store does not hold.
        if !named.is_empty() {
            assert!(
                read.is_some(),
                "{case}: chunks name {named:?}, the key is not held"
            );
        }
        if result.is_ok() {
            succeeded += 1;
            let read = read.unwrap();
            assert_eq!(
                read.len(),
                events.len(),
                "{case}: a reported import lost events"
            );
            for (a, b) in read.iter().zip(&events) {
                assert_eq!(a.to_json_vec(), b.to_json_vec(), "{case}");
            }
        }
        cases += 1;
    }
    assert!(injected > 0);

    // The credential store fails when the key is made, or keeps other bytes than it was
    // given: the import fails before any chunk exists.
    let key_cases: [(&str, KeyFault); 2] = [
        ("unreachable", |p, ns, reference| {
            p.inject_error(
                ns,
                reference,
                keyring_core::Error::PlatformFailure(Box::new(std::io::Error::other("no bus"))),
            )
            .unwrap();
        }),
        ("kept other bytes", |p, _, _| p.tamper_next_write()),
    ];
    for (name, fail) in key_cases {
        let (_dir, layout) = new_store();
        let storage = FaultyStorage::new(open_store(&layout, Access::Write).unwrap());
        let keys = provider();
        let namespace = Namespace::new("imported").unwrap();
        let id = annal_engine::store::key_scope(&layout).unwrap().id.unwrap();
        fail(&keys, &namespace, &namespace.store_reference(&id));
        let result = import_into(&storage, &layout, &keys, &events);
        assert!(
            matches!(result, Err(ImportError::Key(_))),
            "{name}: {result:?}"
        );
        let chunks = storage.list(Area::Chunks).unwrap();
        assert!(chunks.is_empty(), "{name}: a chunk was written: {chunks:?}");
        cases += 1;
    }
    println!(
        "fault suite: import: {cases} cases ({succeeded} imports reported whole and read back \
         whole after the crash, as the clean one did), {injected} faults injected, 2 \
         key-store faults"
    );
    println!("FIGURE fault.import.cases {cases} cases");
    println!("FIGURE fault.import.cases_injected {injected} faults");
}
