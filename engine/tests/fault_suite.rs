//! The fault-injection suite over the `Storage` seam: a realistic workload (history appends with
//! rotation, seals, index files, journal records, a quarantine) runs once to count its I/O
//! operations; then, at every operation of every kind in turn, one fault is injected (a failed
//! write, a short write, a failed sync that drops the page cache, ENOSPC, a failed create, rename
//! or directory sync), the workload goes on, the machine "crashes" keeping a seeded prefix of
//! every unsynced byte, and the store is read again. Invariants, per case:
//!
//! - every record a sync acknowledged reads back, with its exact content;
//! - the writer never reports durable more than it synced (the read store holds a contiguous
//!   prefix of sequences per stream, each at or beyond every acknowledgment);
//! - no byte position of any file is written twice (`FaultyStorage::rewrites`): no record is
//!   ever encrypted twice under one chunk key and IV;
//! - every failure is reported with a health category while it lasts, and the writer recovers
//!   (the next batch after the fault is acknowledged);
//! - `verify` reports nothing but torn tails, and `unsealed` only for a chunk whose seal the
//!   fault stopped.
//!
//! A `harness = false` target: it prints `FIGURE fault.cases_injected N`. `FAULT_CASES` bounds
//! the CI run; `ANNAL_FAULT_CASES=100000 cargo test --release -p annal-engine --test
//! fault_suite` runs every case there is; `ANNAL_FAULT_SEED` replays one run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::num::NonZeroU64;
use std::sync::Arc;

use annal_engine::entropy::SeededEntropy;
use annal_engine::index::{IndexKey, chunk_index_of, write_index_file};
use annal_engine::journal::{Journal, JournalEntry, JournalEvent};
use annal_engine::keys::{JournalKeys, KeyReference};
use annal_engine::profile::ChunkId;
use annal_engine::seal::{SealKey, prepare_seal, verify, write_seal};
use annal_engine::storage::{Access, Area, FaultKind, FaultOp, FaultyStorage, Storage};
use annal_engine::store::{
    History, StoreReader, StoreWriter, WriterConfig, open_store, quarantine_chunk,
};
use annal_schema::EventDraft;
use common::{fixture_drafts, fixture_key, fixture_keys, new_store};

/// Cases in one CI run (each is a fresh store, a workload, a crash and a full read).
const FAULT_CASES: usize = 400;

/// Batches of the workload (four fixture drafts each; four records per chunk, so every batch
/// closes a chunk).
const WORKLOAD_BATCHES: usize = 8;

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

/// What one workload run saw.
#[derive(Default)]
struct Run {
    /// Acknowledged records: sequence -> (its chunk, its content).
    acknowledged: BTreeMap<u64, (ChunkId, EventDraft)>,
    /// Errors seen, each with a health category.
    failures: u64,
    /// An error without a health category.
    uncategorized: Vec<String>,
    /// Whether a seal or index write failed (a chunk may then be unsealed).
    seal_failed: bool,
    /// Whether the batch after the fault was cleared was acknowledged.
    recovered: bool,
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

/// The workload, with `fault` armed (or none, to count operations).
fn workload(storage: &FaultyStorage, fault: Option<Fault>, seed: u64) -> Run {
    let mut run = Run::default();
    match fault {
        Some(Fault::Fail { op, nth, kind }) => storage.fail_nth(op, nth, kind),
        Some(Fault::ShortWrite { nth, keep }) => storage.short_write_nth(nth, keep, FaultKind::Eio),
        Some(Fault::DiskFull { nth }) => {
            storage.fail_from_nth(FaultOp::Write, nth, FaultKind::NoSpace)
        }
        None => {}
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
        let batch: Vec<EventDraft> = drafts[(batch_index * 4) % 16..][..4].to_vec();
        let Some(w) = history.as_mut() else {
            history = writer(storage, seed + batch_index as u64 + 1);
            run.failures += 1;
            continue;
        };
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
            }
        }
        match w.sync() {
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
            let entry = JournalEntry {
                time_ms: 1,
                event: JournalEvent::DropsRecorded { count: 1 },
            };
            if j.append(vec![entry]).is_err() || j.sync().is_err() {
                run.failures += 1;
            }
        }
    }
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
    run
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
        run.recovered,
        "{case}: the writer did not recover after the fault cleared"
    );
    let read: Arc<dyn Storage> = Arc::new(open_store(layout, Access::Read).unwrap());
    let report = StoreReader::<History>::new(Arc::clone(&read))
        .read(&fixture_keys())
        .unwrap();
    let by_sequence: BTreeMap<u64, EventDraft> = report
        .records()
        .map(|r| (r.event.data.sequence.get(), r.event.to_draft()))
        .collect();
    for (sequence, (_, draft)) in &run.acknowledged {
        match by_sequence.get(sequence) {
            Some(found) => assert_eq!(found, draft, "{case}: record {sequence} changed"),
            None => panic!(
                "{case}: acknowledged record {sequence} lost (read: {:?})",
                by_sequence.keys().collect::<Vec<_>>()
            ),
        }
    }
    let seal_key = SealKey::from_purpose_key(&fixture_key().seal_key());
    let verified = verify(&read, &fixture_keys(), &seal_key, None).unwrap();
    for chunk in &verified.chunks {
        for finding in &chunk.findings {
            let name = finding.as_str();
            let allowed = matches!(name, "ok" | "torn_tail" | "quarantined")
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

fn main() {
    if !annal_engine::test_support::suite_selected("fault_suite") {
        return;
    }
    let limit = std::env::var("ANNAL_FAULT_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(FAULT_CASES);
    let seed = std::env::var("ANNAL_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_fa17_u64);
    println!("fault suite: seed {seed} (ANNAL_FAULT_SEED={seed} replays it)");

    // Count the workload's operations without a fault.
    let (_dir, layout) = new_store();
    let storage = FaultyStorage::new(open_store(&layout, Access::Write).unwrap());
    let clean = workload(&storage, None, seed);
    assert!(
        clean.failures == 0 && clean.recovered,
        "the clean workload failed"
    );
    let counts: Vec<(FaultOp, u64)> = [
        FaultOp::Create,
        FaultOp::Write,
        FaultOp::Sync,
        FaultOp::Rename,
        FaultOp::SyncDir,
    ]
    .into_iter()
    .map(|op| (op, storage.count(op)))
    .collect();
    println!("fault suite: the workload does {counts:?} operations");
    drop(storage);

    let mut rng = SeededEntropy::new(seed | 1);
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
                    keep: rng.next_u64() % 64,
                });
                faults.push(Fault::DiskFull { nth });
            }
        }
    }
    // Spread a bounded run over every kind and position.
    let stride = faults.len().div_ceil(limit.max(1)).max(1);
    let mut injected = 0u64;
    let mut cases = 0usize;
    let only: Option<usize> = std::env::var("ANNAL_FAULT_ONLY")
        .ok()
        .and_then(|c| c.parse().ok());
    for (index, fault) in faults
        .iter()
        .enumerate()
        .filter(|(i, _)| i % stride == 0 && only.is_none_or(|o| o == *i))
    {
        let case = format!("case {index} {fault:?} (seed {seed})");
        let (_dir, layout) = new_store();
        let storage = FaultyStorage::new(open_store(&layout, Access::Write).unwrap());
        let run = workload(&storage, Some(*fault), seed);
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
}
