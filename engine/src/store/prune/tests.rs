#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use super::*;
use crate::journal::JOURNAL_TIME_MAX_MS;

const DAY_SECS: u64 = 86_400;
/// "Now" in these tests: day 100 since the epoch.
const NOW: Duration = Duration::from_secs(100 * DAY_SECS);

fn id(n: u8) -> ChunkId {
    ChunkId([n; 16])
}

/// A sealed chunk `n` whose last record is `last_sequence`, at `last_secs`, `len_bytes` long.
fn chunk(n: u8, last_sequence: u64, last_secs: u64, len_bytes: u64) -> PruneCandidate {
    PruneCandidate {
        chunk_id: id(n),
        last_sequence,
        last_time: Duration::from_secs(last_secs),
        latest_time: Some(Duration::from_secs(last_secs)),
        records: 4,
        len_bytes,
    }
}

fn seal_of(c: &PruneCandidate) -> Seal {
    Seal {
        version: crate::seal::SEAL_FORMAT_VERSION,
        ordinal: u64::from(c.chunk_id.0[0]),
        stream_id: "6dd3aa1eef99854a9a3d39ba1e2315f1".to_owned(),
        chunk_id: c.chunk_id,
        records: c.records,
        len_bytes: c.len_bytes,
        first_sequence: c.last_sequence.saturating_sub(3).max(1),
        last_sequence: c.last_sequence,
        first_time: c.last_time,
        last_time: c.last_time,
        chain: [0; 32],
        previous: [0; 32],
    }
}

fn chosen(plan: &PrunePlan) -> Vec<(ChunkId, PruneReason)> {
    plan.choices()
        .iter()
        .map(|c| (c.chunk.chunk_id, c.reason))
        .collect()
}

/// Seven days of retention at [`NOW`].
fn week() -> RetentionCutoff {
    RetentionCutoff::new(NOW, 7)
}

#[test]
fn retention_takes_a_chunk_only_when_its_last_event_is_strictly_older_than_the_cutoff() {
    let cutoff_secs = NOW.as_secs() - 7 * DAY_SECS;
    let just_before = PruneCandidate {
        last_time: Duration::from_secs(cutoff_secs) - Duration::from_nanos(1),
        latest_time: Some(Duration::from_secs(cutoff_secs) - Duration::from_nanos(1)),
        ..chunk(1, 10, 0, 100)
    };
    let at_cutoff = chunk(2, 20, cutoff_secs, 100);
    let after = chunk(3, 30, cutoff_secs + 1, 100);
    let plan = plan_prune(&[just_before, at_cutoff, after], None, week(), None);
    assert_eq!(chosen(&plan), [(id(1), PruneReason::Retention)]);
    // A record at the cutoff is still visible to queries, so its chunk stays: the physical rule
    // is the query's rule, never ahead of it.
    assert!(week().admits(at_cutoff.last_time));
    // Without a cutoff nothing is old.
    assert!(plan_prune(&[just_before], None, RetentionCutoff::NONE, None).is_empty());
}

#[test]
fn the_open_chunk_is_never_pruned_however_old_or_at_whatever_quota() {
    let open = chunk(1, 10, 0, 600);
    let other = chunk(2, 20, 0, 600);
    let eviction = Some(Eviction {
        used_bytes: 10_000,
        quota_bytes: 1_000,
    });
    let plan = plan_prune(&[open, other], Some(open.chunk_id), week(), eviction);
    assert_eq!(chosen(&plan), [(id(2), PruneReason::Retention)]);
    // Even when it is the only chunk and the store is far over its quota.
    assert!(plan_prune(&[open], Some(open.chunk_id), week(), eviction).is_empty());
}

#[test]
fn eviction_takes_the_oldest_by_sequence_until_the_store_is_at_the_low_water_mark() {
    let recent = NOW.as_secs();
    // Ten chunks of 100 bytes, sequences 10..100; a 1000-byte quota, full.
    let chunks: Vec<PruneCandidate> = (1..=10u8)
        .map(|n| chunk(n, u64::from(n) * 10, recent, 100))
        .collect();
    let at = |used_bytes| {
        Some(Eviction {
            used_bytes,
            quota_bytes: 1_000,
        })
    };
    assert_eq!(eviction_target_bytes(1_000), 900);
    let plan = plan_prune(&chunks, None, week(), at(1_000));
    assert_eq!(chosen(&plan), [(id(1), PruneReason::EvictOldest)]);
    // Further over: as many of the oldest as it takes, and no more.
    let plan = plan_prune(&chunks, None, week(), at(1_250));
    assert_eq!(
        chosen(&plan),
        [1, 2, 3, 4].map(|n| (id(n), PruneReason::EvictOldest))
    );
    // Below the quota nothing is evicted, however close.
    assert!(plan_prune(&chunks, None, week(), at(999)).is_empty());
    // `stop_capture` (no eviction) never evicts.
    assert!(plan_prune(&chunks, None, week(), None).is_empty());
    // More needed than the sealed chunks hold: all of them, and capture stops at the quota.
    let plan = plan_prune(&chunks, None, week(), at(100_000));
    assert_eq!(plan.choices().len(), chunks.len());
}

#[test]
fn eviction_orders_by_sequence_not_by_time_and_retention_counts_first() {
    let recent = NOW.as_secs();
    // Chunk 2 holds older sequences but, the clock having been set forward then back, later
    // times: sequence order decides, so a clock set back cannot make new records look old.
    let chunks = [
        chunk(1, 200, recent - 10, 100),
        chunk(2, 100, recent, 100),
        chunk(3, 300, recent - 20, 100),
    ];
    let plan = plan_prune(
        &chunks,
        None,
        week(),
        Some(Eviction {
            used_bytes: 1_000,
            quota_bytes: 1_000,
        }),
    );
    assert_eq!(chosen(&plan), [(id(2), PruneReason::EvictOldest)]);
    // An expired chunk is pruned by retention, and the bytes it frees count: here they are
    // enough, so nothing is evicted on top.
    let expired = chunk(4, 50, 0, 100);
    let plan = plan_prune(
        chunks.iter().chain([&expired]),
        None,
        week(),
        Some(Eviction {
            used_bytes: 1_000,
            quota_bytes: 1_000,
        }),
    );
    assert_eq!(chosen(&plan), [(id(4), PruneReason::Retention)]);
}

#[test]
fn only_present_verified_unrecorded_seals_are_candidates_and_a_recorded_chunk_is_pending() {
    let old = [
        chunk(1, 10, 0, 100),
        chunk(2, 20, 0, 100),
        chunk(3, 30, 0, 100),
    ];
    let seals: Vec<Seal> = old.iter().map(seal_of).collect();
    // Chunk 1 was recorded pruned and its file is still there (a crash between the record and
    // the removal); chunk 3's file is gone; chunk 4 is present without a seal (never a
    // candidate, however old its records).
    let present: BTreeSet<ChunkId> = [id(1), id(2), id(4)].into();
    let recorded: BTreeSet<ChunkId> = [id(1), id(9)].into();
    let mut pruner = Pruner::new(&seals, &present, &recorded);
    assert_eq!(
        pruner.candidates().map(|c| c.chunk_id).collect::<Vec<_>>(),
        [id(2)]
    );
    assert_eq!(pruner.pending(), [id(1)], "recorded and still present");
    let plan = pruner.plan(None, week(), None);
    assert_eq!(chosen(&plan), [(id(2), PruneReason::Retention)]);
    // Once recorded, a chunk is never planned (or recorded) again.
    pruner.recorded(plan);
    assert!(pruner.plan(None, week(), None).is_empty());
    assert_eq!(pruner.pending(), [id(1), id(2)]);
    // A seal found later makes its chunk a candidate (unless it is already recorded, or the
    // seal names another chunk).
    pruner.seal_found(id(5), Some(&seal_of(&chunk(5, 50, 0, 100))));
    pruner.seal_found(id(2), Some(&seals[1]));
    pruner.seal_found(id(6), Some(&seals[0]));
    assert_eq!(
        chosen(&pruner.plan(None, week(), None)),
        [(id(5), PruneReason::Retention)]
    );
}

#[test]
fn a_closed_chunk_makes_a_pass_due_but_is_no_candidate_before_its_seal_is_found() {
    let closed = ClosedChunk {
        chunk_id: id(3),
        stream_id: annal_schema::OpaqueId::new("6dd3aa1eef99854a9a3d39ba1e2315f1").unwrap(),
        records: 4,
        len_bytes: 100,
        first_sequence: 1,
        last_sequence: 4,
        first_time: Duration::ZERO,
        last_time: Duration::from_secs(1),
        latest_time: Duration::from_secs(1),
        chain: [0; 32],
    };
    let mut pruner = Pruner::default();
    assert!(!pruner.due(None, week(), None));
    pruner.closed(&closed);
    assert_eq!(pruner.awaiting_seal(), [id(3)]);
    assert!(pruner.due(None, week(), None), "its records are expired");
    assert!(
        pruner.plan(None, week(), None).is_empty(),
        "but an unsealed chunk is never pruned"
    );
    // Its seal write failed: it stays unsealed for good.
    pruner.seal_found(id(3), None);
    assert!(pruner.awaiting_seal().is_empty());
    assert!(!pruner.due(None, week(), None));
    assert!(pruner.plan(None, week(), None).is_empty());
    // Found: a candidate, with the seal's facts.
    pruner.closed(&closed);
    let seal = seal_of(&chunk(3, 4, 1, 100));
    pruner.seal_found(id(3), Some(&seal));
    assert_eq!(
        chosen(&pruner.plan(None, week(), None)),
        [(id(3), PruneReason::Retention)]
    );
    // Nothing recent is due without a quota to enforce; at the quota with eviction, any chunk
    // but the open one is.
    let recent = Pruner::new(
        [&seal_of(&chunk(4, 8, NOW.as_secs(), 100))],
        &[id(4)].into(),
        &BTreeSet::new(),
    );
    let full = Some(Eviction {
        used_bytes: 1_000,
        quota_bytes: 1_000,
    });
    assert!(!recent.due(None, week(), None));
    assert!(recent.due(None, week(), full));
    assert!(!recent.due(Some(id(4)), week(), full));
}

#[test]
fn waiting_for_seals_being_written_is_worth_it_only_when_they_would_change_the_plan() {
    let closed = |n: u8, last_secs: u64| ClosedChunk {
        chunk_id: id(n),
        stream_id: annal_schema::OpaqueId::new("6dd3aa1eef99854a9a3d39ba1e2315f1").unwrap(),
        records: 4,
        len_bytes: 100,
        first_sequence: u64::from(n) * 4 - 3,
        last_sequence: u64::from(n) * 4,
        first_time: Duration::from_secs(last_secs),
        last_time: Duration::from_secs(last_secs),
        latest_time: Duration::from_secs(last_secs),
        chain: [0; 32],
    };
    let recent = NOW.as_secs();
    let sealed = [chunk(1, 4, recent, 100), chunk(2, 8, recent, 100)];
    let seals: Vec<Seal> = sealed.iter().map(seal_of).collect();
    let mut pruner = Pruner::new(&seals, &[id(1), id(2)].into(), &BTreeSet::new());
    let plan = |p: &Pruner, e| p.plan(None, week(), e);
    // Nothing awaits: never.
    assert!(!pruner.needs_awaited(&plan(&pruner, None), None, week(), None));
    // A recent chunk awaits: retention would not take it.
    pruner.closed(&closed(3, recent));
    assert!(!pruner.needs_awaited(&plan(&pruner, None), None, week(), None));
    // At the quota, the sealed chunks are enough to reach the low-water mark: no wait.
    let enough = Some(Eviction {
        used_bytes: 1_000,
        quota_bytes: 1_000,
    });
    assert!(!pruner.needs_awaited(&plan(&pruner, enough), None, week(), enough));
    // They are not: the awaited one may be needed.
    let short = Some(Eviction {
        used_bytes: 1_300,
        quota_bytes: 1_000,
    });
    assert!(pruner.needs_awaited(&plan(&pruner, short), None, week(), short));
    // Unless it is the open chunk.
    assert!(!pruner.needs_awaited(&plan(&pruner, short), Some(id(3)), week(), short));
    // An expired chunk awaits: retention would take it.
    pruner.closed(&closed(4, 0));
    assert!(pruner.needs_awaited(&plan(&pruner, None), None, week(), None));
}

#[test]
fn a_choice_journals_the_seals_facts_within_the_journals_bounds() {
    let c = PruneCandidate {
        last_time: Duration::new(1_764_540_843, 753_999_999),
        ..chunk(7, 40, 0, 100)
    };
    let event = PruneChoice {
        chunk: c,
        reason: PruneReason::EvictOldest,
    }
    .event();
    assert_eq!(
        event,
        JournalEvent::ChunkPruned {
            chunk: id(7),
            reason: PruneReason::EvictOldest,
            last_time_ms: 1_764_540_843_753,
            records: 4,
        }
    );
    assert_eq!(event.check_bounds(), Ok(()));
    let late = JournalEvent::ChunkPruned {
        chunk: id(7),
        reason: PruneReason::Retention,
        last_time_ms: JOURNAL_TIME_MAX_MS + 1,
        records: 4,
    };
    assert!(late.check_bounds().is_err());
    let empty = JournalEvent::ChunkPruned {
        chunk: id(7),
        reason: PruneReason::Retention,
        last_time_ms: 1,
        records: 0,
    };
    assert!(
        empty.check_bounds().is_err(),
        "an empty chunk is never sealed"
    );
}

#[test]
fn a_chunk_is_at_most_a_sixteenth_of_the_quota() {
    use crate::journal::{QUOTA_MAX_BYTES, QUOTA_MIN_BYTES};
    assert_eq!(chunk_size_limit_for_quota(QUOTA_MIN_BYTES), 64 * 1024);
    assert_eq!(
        chunk_size_limit_for_quota(annal_schema::tools::DEFAULT_QUOTA_BYTES),
        CHUNK_SIZE_LIMIT_BYTES
    );
    assert_eq!(
        chunk_size_limit_for_quota(QUOTA_MAX_BYTES),
        CHUNK_SIZE_LIMIT_BYTES
    );
}

#[test]
fn a_chunk_whose_latest_record_is_still_visible_is_kept_whatever_its_last_record_says() {
    // Records race to the queue and clocks are set back: the last record by sequence is not
    // always the latest in time. Retention decides on the latest.
    let cutoff_secs = NOW.as_secs() - 7 * DAY_SECS;
    let raced = PruneCandidate {
        latest_time: Some(Duration::from_secs(cutoff_secs + 60)),
        ..chunk(1, 10, 0, 100)
    };
    let expired = chunk(2, 20, 0, 100);
    assert_eq!(
        chosen(&plan_prune(&[raced, expired], None, week(), None)),
        [(id(2), PruneReason::Retention)]
    );
    // Sealed before this writer opened: the seal nominates it, the confirmation decides.
    let seals = [
        seal_of(&chunk(3, 30, 0, 100)),
        seal_of(&chunk(4, 40, 0, 100)),
    ];
    let mut pruner = Pruner::new(&seals, &[id(3), id(4)].into(), &BTreeSet::new());
    let plan = pruner.plan(None, week(), None);
    assert_eq!(chosen(&plan).len(), 2, "both nominated by their seals");
    let read = std::cell::Cell::new(0);
    let confirmed = pruner.confirm_latest_times(plan, week(), |c| {
        read.set(read.get() + 1);
        match c.chunk_id {
            n if n == id(3) => Some(Duration::from_secs(cutoff_secs)),
            _ => Some(Duration::ZERO),
        }
    });
    assert_eq!(chosen(&confirmed), [(id(4), PruneReason::Retention)]);
    assert_eq!(read.get(), 2);
    // Learned once: the next pass plans with it and reads nothing.
    let plan = pruner.plan(None, week(), None);
    assert_eq!(chosen(&plan), [(id(4), PruneReason::Retention)]);
    let again = pruner.confirm_latest_times(plan, week(), |_| panic!("read again"));
    assert_eq!(chosen(&again), [(id(4), PruneReason::Retention)]);
    // A latest time that cannot be read is no licence to prune.
    let seals = [seal_of(&chunk(5, 50, 0, 100))];
    let mut unknown = Pruner::new(&seals, &[id(5)].into(), &BTreeSet::new());
    let plan = unknown.plan(None, week(), None);
    assert!(
        unknown
            .confirm_latest_times(plan, week(), |_| None)
            .is_empty()
    );
}

#[test]
fn a_torn_chunk_is_a_candidate_unless_a_seal_names_it_or_the_journal_recorded_it() {
    let old = NOW.as_secs() - 30 * DAY_SECS;
    let sealed = [chunk(2, 8, NOW.as_secs(), 100)];
    let seals: Vec<Seal> = sealed.iter().map(seal_of).collect();
    let reads: Vec<SealRead> = seals
        .iter()
        .map(|s| SealRead {
            file_name: String::new(),
            chunk_id: Some(s.chunk_id),
            seal: Ok(s.clone()),
        })
        .collect();
    let present: BTreeSet<ChunkId> = [id(1), id(2), id(3)].into();
    let recorded: BTreeSet<ChunkId> = [id(3)].into();
    let mut pruner = Pruner::new(&seals, &present, &recorded);
    // Torn chunk 1 (old): a candidate. Chunk 2 read as torn but sealed: not replaced by its
    // scan. Chunk 3: recorded already, only its removal is pending.
    pruner.add_torn(chunk(1, 4, old, 150), &reads);
    pruner.add_torn(chunk(2, 8, old, 170), &reads);
    pruner.add_torn(chunk(3, 12, old, 100), &reads);
    assert_eq!(
        chosen(&pruner.plan(None, week(), None)),
        [(id(1), PruneReason::Retention)]
    );
    assert_eq!(pruner.pending(), [id(3)]);
    // Eviction takes it in sequence order too, with its whole file's length.
    let mut recent = Pruner::new(&seals, &present, &BTreeSet::new());
    recent.add_torn(chunk(1, 4, NOW.as_secs(), 150), &reads);
    let at_quota = Some(Eviction {
        used_bytes: 1_000,
        quota_bytes: 1_000,
    });
    let plan = recent.plan(None, week(), at_quota);
    assert_eq!(chosen(&plan), [(id(1), PruneReason::EvictOldest)]);
    assert_eq!(plan.choices()[0].chunk.len_bytes, 150);
}
