//! `verify`: walks every history chunk, every seal and the checkpoint, read-only, and reports
//! typed findings per chunk and for the store. How each finding is detected, and what it takes
//! to detect a rollback, is in `docs/design.md` ("Verify").

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use super::checkpoint::{Checkpoint, is_rolled_back};
use super::{
    DIGEST_LEN_BYTES, ReadSealsError, Seal, SealFault, SealKey, chain_digest, read_seals,
    record_items,
};
use crate::keys::HistoryKeys;
use crate::profile::{
    ChunkId, ChunkVerdict, CorruptReason, HistorySchema, RecordSchema, UnreadableReason,
    read_header,
};
use crate::storage::{Area, Storage, read_bounded};
use crate::store::{
    ChunkReport, History, MAX_CHUNK_FILE_BYTES, ReadStoreError, StoreReader, chunk_file_name,
    parse_chunk_file_name,
};

/// Which part of a sealed chunk no longer matches its seal (the first that differs, in this
/// order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mismatch {
    /// The header names another stream than the seal.
    Stream,
    /// Another number of valid records.
    Records,
    /// Another first or last sequence.
    Sequences,
    /// Another first or last event time.
    Times,
    /// Another file length (bytes after the last record, or a shorter file).
    Length,
    /// Same counts, other bytes: the chain digest differs.
    Chain,
}

impl Mismatch {
    /// A stable snake_case name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Stream => "stream",
            Self::Records => "records",
            Self::Sequences => "sequences",
            Self::Times => "times",
            Self::Length => "length",
            Self::Chain => "chain",
        }
    }
}

/// A finding about one chunk (or about the seal of one).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ChunkFinding {
    /// Nothing is wrong.
    Ok,
    /// The newest, unsealed chunk of its stream ends in bytes that are not a record: a crash's
    /// leftovers (its records before them read).
    TornTail {
        /// Bytes after the last valid record.
        bytes_left_out: u64,
    },
    /// The reader refuses the chunk.
    Corrupt {
        /// Why (the reader's reason).
        reason: CorruptReason,
    },
    /// The chunk file could not be read at all.
    Unreadable {
        /// Why.
        reason: UnreadableReason,
    },
    /// A valid seal names a chunk that is not in `chunks/`.
    Missing {
        /// The seal's ordinal.
        ordinal: u64,
    },
    /// The seal chain's order disagrees with the sequence order: in ordinal order this seal's
    /// records come before those of an earlier seal.
    Reordered {
        /// This seal's ordinal.
        ordinal: u64,
    },
    /// The chunk no longer matches its seal, although it may be valid on its own (truncated at
    /// a record boundary, an older copy of itself, bytes appended).
    Replaced {
        /// What differs first.
        mismatch: Mismatch,
    },
    /// The chunk claims records another chunk claims: a copy of that chunk under a second name,
    /// sequences another chunk holds too, or a seal whose range overlaps another seal's.
    Duplicated {
        /// The other chunk.
        of: ChunkId,
    },
    /// A chunk with records and no seal that is not the newest chunk of its stream (only that
    /// one may still be open, or have been left open by its writer).
    Unsealed,
    /// The chunk's seal file is not a seal that verifies under the seal key (or is not where it
    /// belongs).
    SealInvalid {
        /// Why.
        fault: SealFault,
    },
    /// A valid seal names a chunk the owner moved aside (`annal repair --quarantine`): it is in
    /// `engine/quarantine/`, kept and never read. Not a problem by itself: the journal records
    /// the repair.
    Quarantined {
        /// The seal's ordinal.
        ordinal: u64,
    },
    /// A valid seal names a chunk the journal records as pruned (retention or `evict_oldest`),
    /// and its file is gone: not a problem, the seal stays so the chain stays whole
    /// ([`VerifyReport::with_pruned`]).
    Pruned {
        /// The seal's ordinal.
        ordinal: u64,
    },
}

impl ChunkFinding {
    /// A stable snake_case name (`annal verify --json`).
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::TornTail { .. } => "torn_tail",
            Self::Corrupt { .. } => "corrupt",
            Self::Unreadable { .. } => "unreadable",
            Self::Missing { .. } => "missing",
            Self::Reordered { .. } => "reordered",
            Self::Replaced { .. } => "replaced",
            Self::Duplicated { .. } => "duplicated",
            Self::Unsealed => "unsealed",
            Self::SealInvalid { .. } => "seal_invalid",
            Self::Quarantined { .. } => "quarantined",
            Self::Pruned { .. } => "pruned",
        }
    }

    /// The finding's reason, snake_case, where it has one (`corrupt`, `unreadable`,
    /// `replaced`, `seal_invalid`).
    pub fn reason(&self) -> Option<&'static str> {
        match self {
            Self::Corrupt { reason } => Some(reason.as_str()),
            Self::Unreadable { reason } => Some(reason.as_str()),
            Self::Replaced { mismatch } => Some(mismatch.as_str()),
            Self::SealInvalid { fault } => Some(fault.as_str()),
            _ => None,
        }
    }
}

/// A finding about the store as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreFinding {
    /// The seal chain is older than the checkpoint: the newest seal has a lower ordinal, or the
    /// seal at the checkpoint's ordinal has another digest (the directory was replaced with an
    /// older copy, perhaps written on since).
    RolledBack {
        /// The checkpoint.
        checkpoint: Checkpoint,
        /// The newest verified seal found, if any.
        newest: Option<Checkpoint>,
    },
    /// Seal ordinals are missing from the chain (a chunk deleted together with its seal).
    ChainGap {
        /// The last ordinal present before the gap (0: the chain does not start at 1).
        after: u64,
        /// The next ordinal present.
        next: u64,
    },
    /// A seal's `previous` is not the digest of the seal before it, or two seals share an
    /// ordinal: seals of two divergent histories are mixed.
    ChainBroken {
        /// The seal's ordinal.
        ordinal: u64,
    },
    /// Entries in `chunks/` that are not chunk files (never read; the reference refuses them).
    ForeignEntries {
        /// Their names (lossy).
        names: Vec<String>,
    },
    /// Every chunk with records fails authentication at record 0: probably the wrong history
    /// key, not tampering with every chunk.
    ProbableWrongKey,
    /// The checkpoint store was read and holds no checkpoint, yet the chain has seals: a
    /// rollback of the whole directory cannot be ruled out (the first seal's checkpoint lost to
    /// a crash or a failed store, which the writer mends on its next run; or the checkpoint
    /// credential removed).
    CheckpointMissing {
        /// The newest verified seal.
        newest: Checkpoint,
    },
    /// The checkpoint store could not be read, or holds a value that is not a checkpoint: a
    /// rollback of the whole directory cannot be ruled out.
    CheckpointUnreadable,
}

impl StoreFinding {
    /// A stable snake_case name (`annal verify --json`).
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::RolledBack { .. } => "rolled_back",
            Self::ChainGap { .. } => "chain_gap",
            Self::ChainBroken { .. } => "chain_broken",
            Self::ForeignEntries { .. } => "foreign_entries",
            Self::ProbableWrongKey => "probable_wrong_key",
            Self::CheckpointMissing { .. } => "checkpoint_missing",
            Self::CheckpointUnreadable => "checkpoint_unreadable",
        }
    }
}

/// What `verify` compares the seal chain with: what was read from the checkpoint store, or that
/// none was consulted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CheckpointReading {
    /// No checkpoint store was consulted (offline, with a key file): an older copy of the whole
    /// directory cannot be told from the current one.
    NotConsulted,
    /// The checkpoint store was read before the seals were: what it holds (`None`: never
    /// stored). Read first, because the checkpoint only ever names a seal already durable, so
    /// a writer sealing meanwhile cannot make the chain look older than it.
    Read(Option<Checkpoint>),
    /// The checkpoint store could not be read, or its value is not a checkpoint.
    Unreadable,
}

/// What `verify` found about one chunk id (a chunk file, a seal, or both).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkCheck {
    /// The chunk file's name (for a missing chunk, the name it should have; for a seal whose
    /// name carries no chunk id, the seal file's name).
    pub file_name: String,
    /// The chunk id, when a name carried one.
    pub chunk_id: Option<ChunkId>,
    /// Valid records the reader returned from the chunk.
    pub records: u64,
    /// The ordinal of the chunk's verified seal, if it has one.
    pub sealed: Option<u64>,
    /// The findings; exactly `[Ok]` when nothing is wrong.
    pub findings: Vec<ChunkFinding>,
}

impl ChunkCheck {
    /// Whether the only finding is `Ok` (or `Quarantined`: the owner's repair, or `Pruned`:
    /// retention or eviction, neither of them damage).
    pub fn is_ok(&self) -> bool {
        self.findings == [ChunkFinding::Ok]
            || matches!(
                self.findings[..],
                [ChunkFinding::Quarantined { .. } | ChunkFinding::Pruned { .. }]
            )
    }

    fn add(&mut self, finding: ChunkFinding) {
        if !self.findings.contains(&finding) {
            self.findings.push(finding);
        }
    }
}

/// Everything `verify` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// One entry per chunk id: chunk files in sequence order (as the reader orders them), then
    /// seals without a chunk, by name.
    pub chunks: Vec<ChunkCheck>,
    /// Store-level findings.
    pub store: Vec<StoreFinding>,
    /// How many seals verified.
    pub seals: u64,
    /// Whether the chain was compared with a checkpoint store that could be read (without one a
    /// rollback of the whole directory cannot be detected).
    pub checkpoint_checked: bool,
}

impl VerifyReport {
    /// No finding at all: every chunk `Ok`, nothing at store level. `annal verify` exits 0 only
    /// then.
    pub fn is_clean(&self) -> bool {
        self.store.is_empty() && self.chunks.iter().all(ChunkCheck::is_ok)
    }

    /// Every chunk finding other than `Ok`, with its chunk's file name.
    pub fn findings(&self) -> impl Iterator<Item = (&str, &ChunkFinding)> {
        self.chunks.iter().flat_map(|c| {
            c.findings
                .iter()
                .filter(|f| **f != ChunkFinding::Ok)
                .map(|f| (c.file_name.as_str(), f))
        })
    }

    /// This report with every `missing` chunk that `pruned` names reported as `pruned`. The
    /// pruned set is the engine journal's (`store::pruned_chunks`), which `verify` cannot read
    /// with the history and seal keys alone; without it a pruned chunk stays `missing` (fail
    /// closed: a deletion is never taken for a prune on anyone's word but the journal's).
    pub fn with_pruned(mut self, pruned: &std::collections::BTreeSet<ChunkId>) -> Self {
        for check in &mut self.chunks {
            if check.chunk_id.is_some_and(|id| pruned.contains(&id)) {
                for finding in &mut check.findings {
                    if let ChunkFinding::Missing { ordinal } = *finding {
                        *finding = ChunkFinding::Pruned { ordinal };
                    }
                }
            }
        }
        self
    }
}

/// `verify` could not run: a directory could not be listed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// `chunks/` could not be listed.
    #[error(transparent)]
    Chunks(#[from] ReadStoreError),
    /// `engine/seals/` could not be listed.
    #[error(transparent)]
    Seals(#[from] ReadSealsError),
}

/// Reads every chunk (with `keys`), every seal (with `seal_key`) and compares the seal chain
/// with `checkpoint`. Read-only: creates, changes and locks nothing. Fails only when a directory
/// cannot be listed; everything else is a finding.
pub fn verify(
    storage: &Arc<dyn Storage>,
    keys: &HistoryKeys,
    seal_key: &SealKey,
    checkpoint: CheckpointReading,
) -> Result<VerifyReport, VerifyError> {
    let report = StoreReader::<History>::new(Arc::clone(storage)).read(keys)?;
    let seal_reads = read_seals(storage.as_ref(), seal_key)?;
    let mut checks: Vec<ChunkCheck> = report
        .chunks
        .iter()
        .map(|c| ChunkCheck {
            file_name: c.file_name.clone(),
            chunk_id: c.chunk_id,
            records: c.verdict.records().len() as u64,
            sealed: None,
            findings: Vec::new(),
        })
        .collect();
    let mut by_id: HashMap<ChunkId, usize> = HashMap::new();
    let mut by_name: HashMap<String, usize> = HashMap::new();
    for (index, check) in checks.iter().enumerate() {
        if let Some(id) = check.chunk_id {
            by_id.entry(id).or_insert(index);
        }
        by_name.insert(check.file_name.clone(), index);
    }
    let chunk_count = checks.len();
    // Seal-only entries (a seal with no chunk file) are added after the chunks.
    let mut extra: BTreeMap<String, ChunkCheck> = BTreeMap::new();
    let mut seals: BTreeMap<ChunkId, &Seal> = BTreeMap::new();
    for read in &seal_reads {
        match &read.seal {
            Ok(seal) => {
                seals.insert(seal.chunk_id, seal);
            }
            Err(fault) => {
                let finding = ChunkFinding::SealInvalid { fault: *fault };
                match read.chunk_id.and_then(|id| by_id.get(&id)) {
                    Some(&index) => checks[index].add(finding),
                    None => {
                        let name = read
                            .chunk_id
                            .map_or(read.file_name.clone(), |id| chunk_file_name(id).to_string());
                        extra
                            .entry(name.clone())
                            .or_insert_with(|| empty_check(name, read.chunk_id))
                            .add(finding);
                    }
                }
            }
        }
    }

    let newest = newest_of_each_stream(&report.chunks);
    for (index, chunk) in report.chunks.iter().enumerate() {
        let seal = chunk.chunk_id.and_then(|id| seals.get(&id).copied());
        checks[index].sealed = seal.map(|s| s.ordinal);
        let finding = match (&chunk.verdict, seal) {
            (ChunkVerdict::Unreadable { reason }, _) => {
                Some(ChunkFinding::Unreadable { reason: *reason })
            }
            (
                ChunkVerdict::Corrupt {
                    reason: CorruptReason::ChunkIdMismatch,
                    ..
                },
                _,
            ) => Some(
                copy_of(storage.as_ref(), chunk, &by_id, &seals)
                    .map(|of| ChunkFinding::Duplicated { of })
                    .unwrap_or(ChunkFinding::Corrupt {
                        reason: CorruptReason::ChunkIdMismatch,
                    }),
            ),
            (ChunkVerdict::Corrupt { reason, .. }, _) => {
                Some(ChunkFinding::Corrupt { reason: *reason })
            }
            (ChunkVerdict::Complete { .. } | ChunkVerdict::TornTail { .. }, Some(seal)) => {
                compare(storage.as_ref(), chunk, seal)
                    .map(|mismatch| ChunkFinding::Replaced { mismatch })
            }
            (ChunkVerdict::TornTail { valid_len, .. }, None) => Some(ChunkFinding::TornTail {
                bytes_left_out: chunk.len_bytes.saturating_sub(*valid_len),
            }),
            (ChunkVerdict::Complete { records }, None) => {
                (!records.is_empty() && !newest.contains(&index)).then_some(ChunkFinding::Unsealed)
            }
        };
        if let Some(finding) = finding {
            checks[index].add(finding);
        }
    }

    // Sequences two chunks both hold, as the reader's merge found them.
    for conflict in &report.conflicts {
        let (Some(&index), Some(of)) = (
            by_name.get(&conflict.conflicting_file),
            parse_chunk_file_name(&conflict.kept_file),
        ) else {
            continue;
        };
        checks[index].add(ChunkFinding::Duplicated { of });
    }

    let mut store = Vec::new();
    let mut chain: Vec<&Seal> = seals.values().copied().collect();
    chain.sort_by_key(|s| (s.ordinal, s.chunk_id));
    let mut seal_finding = |seal: &Seal, finding: ChunkFinding| match by_id.get(&seal.chunk_id) {
        Some(&index) => checks[index].add(finding),
        None => {
            let name = chunk_file_name(seal.chunk_id).to_string();
            extra
                .entry(name.clone())
                .or_insert_with(|| empty_check(name, Some(seal.chunk_id)))
                .add(finding);
        }
    };
    for seal in &chain {
        if !by_id.contains_key(&seal.chunk_id) {
            let aside = storage.has_area(Area::Quarantine)
                && storage
                    .open_read(Area::Quarantine, &chunk_file_name(seal.chunk_id))
                    .is_ok();
            let ordinal = seal.ordinal;
            seal_finding(
                seal,
                if aside {
                    ChunkFinding::Quarantined { ordinal }
                } else {
                    ChunkFinding::Missing { ordinal }
                },
            );
        }
    }
    // Sequence ranges in chain order: an overlap with an earlier seal is a duplicate; a range
    // entirely below an earlier one is a reorder.
    let mut ranges: BTreeMap<u64, (u64, ChunkId)> = BTreeMap::new();
    let mut highest: Option<u64> = None;
    for seal in &chain {
        let overlap = ranges
            .range(..=seal.last_sequence)
            .next_back()
            .filter(|(_, (last, _))| *last >= seal.first_sequence)
            .map(|(_, (_, id))| *id);
        if let Some(of) = overlap {
            seal_finding(seal, ChunkFinding::Duplicated { of });
            continue;
        }
        if highest.is_some_and(|h| seal.first_sequence <= h) {
            seal_finding(
                seal,
                ChunkFinding::Reordered {
                    ordinal: seal.ordinal,
                },
            );
        }
        ranges.insert(seal.first_sequence, (seal.last_sequence, seal.chunk_id));
        highest = highest.max(Some(seal.last_sequence));
    }
    // The chain itself: ordinals 1, 2, ... each linked to the one before.
    let mut before: Option<&Seal> = None;
    for seal in &chain {
        let (after, expected) = match before {
            None => (0, [0u8; DIGEST_LEN_BYTES]),
            Some(b) => (b.ordinal, b.digest()),
        };
        if before.is_some_and(|b| b.ordinal == seal.ordinal) {
            push_once(
                &mut store,
                StoreFinding::ChainBroken {
                    ordinal: seal.ordinal,
                },
            );
        } else if seal.ordinal != after + 1 {
            store.push(StoreFinding::ChainGap {
                after,
                next: seal.ordinal,
            });
        } else if seal.previous != expected {
            store.push(StoreFinding::ChainBroken {
                ordinal: seal.ordinal,
            });
        }
        before = Some(seal);
    }
    let newest = chain.last().map(|s| Checkpoint::of(s));
    match checkpoint {
        CheckpointReading::NotConsulted => {}
        CheckpointReading::Unreadable => store.push(StoreFinding::CheckpointUnreadable),
        CheckpointReading::Read(None) => {
            if let Some(newest) = newest {
                store.push(StoreFinding::CheckpointMissing { newest });
            }
        }
        CheckpointReading::Read(Some(checkpoint)) => {
            if is_rolled_back(chain.iter().map(|s| Checkpoint::of(s)), &checkpoint) {
                store.push(StoreFinding::RolledBack { checkpoint, newest });
            }
        }
    }
    if !report.foreign_entries.is_empty() {
        store.push(StoreFinding::ForeignEntries {
            names: report
                .foreign_entries
                .iter()
                .map(|n| n.to_string_lossy().into_owned())
                .collect(),
        });
    }
    if report.probable_wrong_key {
        store.push(StoreFinding::ProbableWrongKey);
    }

    debug_assert_eq!(chunk_count, report.chunks.len());
    checks.extend(extra.into_values());
    for check in &mut checks {
        if check.findings.is_empty() {
            check.findings.push(ChunkFinding::Ok);
        }
    }
    Ok(VerifyReport {
        chunks: checks,
        store,
        seals: chain.len() as u64,
        checkpoint_checked: matches!(checkpoint, CheckpointReading::Read(_)),
    })
}

fn empty_check(file_name: String, chunk_id: Option<ChunkId>) -> ChunkCheck {
    ChunkCheck {
        file_name,
        chunk_id,
        records: 0,
        sealed: None,
        findings: Vec::new(),
    }
}

fn push_once(store: &mut Vec<StoreFinding>, finding: StoreFinding) {
    if !store.contains(&finding) {
        store.push(finding);
    }
}

/// Per stream (header stream id), the chunk with records whose first sequence is highest: the
/// only chunk of a stream that may be without a seal (still open, or left open by its writer).
fn newest_of_each_stream(chunks: &[ChunkReport<annal_schema::Event>]) -> HashSet<usize> {
    let mut newest: HashMap<&str, (u64, usize)> = HashMap::new();
    for (index, chunk) in chunks.iter().enumerate() {
        let (Some(header), Some(first)) = (&chunk.header, chunk.first_record()) else {
            continue;
        };
        let first = HistorySchema::sequence(&first.event);
        let slot = newest
            .entry(header.header.stream_id())
            .or_insert((first, index));
        if first > slot.0 {
            *slot = (first, index);
        }
    }
    newest.values().map(|(_, index)| *index).collect()
}

fn chunk_bytes(storage: &dyn Storage, chunk_id: ChunkId) -> Option<Vec<u8>> {
    let file = storage
        .open_read(Area::Chunks, &chunk_file_name(chunk_id))
        .ok()?;
    read_bounded(file.as_ref(), MAX_CHUNK_FILE_BYTES).ok()?.ok()
}

/// The other chunk whose header a chunk with `chunk_id_mismatch` carries, when that chunk is in
/// the store or sealed: a copy under a second name.
fn copy_of(
    storage: &dyn Storage,
    chunk: &ChunkReport<annal_schema::Event>,
    by_id: &HashMap<ChunkId, usize>,
    seals: &BTreeMap<ChunkId, &Seal>,
) -> Option<ChunkId> {
    let own = chunk.chunk_id?;
    let bytes = chunk_bytes(storage, own)?;
    let (header, _) = read_header(&bytes).ok()?;
    let named = header.header.chunk_id();
    (named != own && (by_id.contains_key(&named) || seals.contains_key(&named))).then_some(named)
}

/// What of a sealed chunk differs from its seal, if anything. The chunk is read again and the
/// chain digest computed over its bytes at the records' offsets.
fn compare(
    storage: &dyn Storage,
    chunk: &ChunkReport<annal_schema::Event>,
    seal: &Seal,
) -> Option<Mismatch> {
    let records = chunk.verdict.records();
    let Some(header) = &chunk.header else {
        return Some(Mismatch::Chain);
    };
    if header.header.stream_id() != seal.stream_id {
        return Some(Mismatch::Stream);
    }
    if records.len() as u64 != seal.records {
        return Some(Mismatch::Records);
    }
    let (Some(first), Some(last)) = (records.first(), records.last()) else {
        return Some(Mismatch::Records);
    };
    if first.sequence() != seal.first_sequence || last.sequence() != seal.last_sequence {
        return Some(Mismatch::Sequences);
    }
    if first.event.time.since_epoch() != seal.first_time
        || last.event.time.since_epoch() != seal.last_time
    {
        return Some(Mismatch::Times);
    }
    if chunk.len_bytes != seal.len_bytes {
        return Some(Mismatch::Length);
    }
    let Some(bytes) = chunk.chunk_id.and_then(|id| chunk_bytes(storage, id)) else {
        return Some(Mismatch::Chain);
    };
    if bytes.len() as u64 != seal.len_bytes {
        return Some(Mismatch::Length);
    }
    let Some(header_bytes) = bytes.get(..header.bytes.len()) else {
        return Some(Mismatch::Length);
    };
    let chain = record_items(&bytes, records.iter().map(|r| (r.offset, r.len)))
        .map(|items| chain_digest(header_bytes, items));
    (chain != Some(seal.chain)).then_some(Mismatch::Chain)
}
