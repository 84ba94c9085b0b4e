//! Physical retention and `on_quota = evict_oldest`: which sealed (or torn) history chunks may
//! go, and removing them with the journal's record first.
//!
//! # Which chunks
//!
//! Only a chunk with a **verified seal**, or a **torn** one (below), present in `chunks/`, and
//! not the chunk the writer is appending to. Its seal alone decides, never the file's times (an
//! mtime is anyone's to set, and a restored backup has fresh ones):
//!
//! - **retention**: the latest event time among the chunk's records is strictly older than the
//!   retention cutoff ([`RetentionCutoff`], the one queries apply), so nothing in the chunk is
//!   visible any more. The seal's last event time is that of the last record, which is not
//!   always the latest (captures race to the queue; a wall clock can be set back), so it only
//!   nominates a chunk: the latest time is what the writer saw while writing it
//!   ([`ClosedChunk::latest_time`]) or, for a chunk sealed before this writer opened, what its
//!   index file or a scan of it says ([`Pruner::confirm_latest_times`]). Nothing is pruned on a
//!   guess;
//! - **eviction** (only when the owner chose `evict_oldest`, and only once the store is at its
//!   quota): the oldest chunks by sequence (never by time: a clock set back does not make new
//!   records look old) until the store is at or below [`EVICTION_LOW_WATER_PERCENT`] of the
//!   quota. What retention takes counts first. When the sealed chunks are not enough (the open
//!   chunk, unsealed chunks and the journal are never evicted), capture stops at the quota as
//!   with `stop_capture`.
//!
//! An unsealed chunk is never pruned: without a seal nothing vouches for what it holds, and
//! `verify` could not tell its absence from a deletion. The one exception is a **torn** chunk,
//! the last chunk of a writer generation that crashed mid-append ([`Pruner::add_torn`]): no seal
//! will ever be written for it (its file holds bytes past its last record), so without it the
//! events it holds would outlive retention on disk and its bytes would count against the quota
//! for good. The writer that opens the store reads every one of its authenticated records
//! (a torn chunk is never vouched for by a seal, so the open reads it whole), and those facts
//! stand in for a seal's: its last sequence, its latest event time, its file's length. `verify`
//! loses nothing: no seal names a torn chunk, so it never reported its absence either. Just
//! before its record, each chosen
//! chunk's file is checked to still have its seal's length: a chunk already gone, or no longer
//! what its seal says, is left alone (recording it pruned would hide what `verify` must
//! report).
//!
//! # Order (docs/design.md, "Pruning")
//!
//! 1. plan ([`Pruner::plan`], pure);
//! 2. check the chosen files ([`Pruner::confirm_on_disk`]);
//! 3. append one `chunk_pruned` per chunk to the journal and sync;
//! 4. only then ([`Pruner::recorded`], [`Pruner::remove_recorded`]) unlink the chunk files,
//!    sync `chunks/`, and remove their derived index files.
//!
//! The seal files stay, so the chain stays checkable and `verify` reports a pruned chunk as
//! `pruned`. A crash before 3 is durable leaves the chunk, unrecorded; a crash after it leaves a
//! recorded chunk whose file may still be there, which `verify` checks like any sealed chunk and
//! the next writer removes ([`Pruner::at_open`]). So no crash leaves a chunk gone without its
//! record, and no chunk goes unless it was chosen.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::index::index_file_name;
use crate::journal::{Journal, JournalEvent, PruneReason, State};
use crate::keys::JournalKeys;
use crate::profile::ChunkId;
use crate::query::{Index, RetentionCutoff};
use crate::seal::{Seal, SealRead};
use crate::storage::{Area, Storage, StorageError};

use super::read::{ReadStoreError, StoreReader};
use super::write::ClosedChunk;
use super::{CHUNK_SIZE_LIMIT_BYTES, chunk_file_name, parse_chunk_file_name};

/// Eviction stops once the store is at or below this share of its quota, in percent: a pass
/// frees a tenth of the quota, so the next one is that many bytes of capture away rather than
/// one record.
pub const EVICTION_LOW_WATER_PERCENT: u64 = 90;

/// A chunk is at most this fraction of the quota (`1 / QUOTA_CHUNKS_MIN`): at the smallest quota
/// (1 MiB) chunks rotate at 64 KiB instead of 4 MiB, so the quota always holds sealed chunks for
/// eviction to take, and one eviction never takes much more than it must.
pub const QUOTA_CHUNKS_MIN: u64 = 16;

/// Where the writer rotates for a quota of `quota_bytes`: a sixteenth of it, at most
/// [`CHUNK_SIZE_LIMIT_BYTES`] (the default quota of 100 MiB keeps 4 MiB chunks).
pub fn chunk_size_limit_for_quota(quota_bytes: u64) -> u64 {
    (quota_bytes / QUOTA_CHUNKS_MIN).min(CHUNK_SIZE_LIMIT_BYTES)
}

/// The bytes eviction brings the store down to: [`EVICTION_LOW_WATER_PERCENT`] of the quota.
pub fn eviction_target_bytes(quota_bytes: u64) -> u64 {
    quota_bytes.saturating_mul(EVICTION_LOW_WATER_PERCENT) / 100
}

/// What pruning knows of a sealed chunk: its verified seal's facts (for a torn chunk, its
/// authenticated records', `Pruner::add_torn`), nothing of its file's metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PruneCandidate {
    /// The chunk.
    pub chunk_id: ChunkId,
    /// Sequence of its last record (the eviction order).
    pub last_sequence: u64,
    /// Event time of its last record, since the Unix epoch (what nominates it for retention).
    pub last_time: Duration,
    /// The latest event time among its records, once known (what retention decides on).
    pub latest_time: Option<Duration>,
    /// Its records.
    pub records: u64,
    /// Its file's length as sealed, in bytes (what eviction frees).
    pub len_bytes: u64,
}

impl From<&Seal> for PruneCandidate {
    fn from(seal: &Seal) -> Self {
        Self {
            chunk_id: seal.chunk_id,
            last_sequence: seal.last_sequence,
            last_time: seal.last_time,
            latest_time: None,
            records: seal.records,
            len_bytes: seal.len_bytes,
        }
    }
}

/// The store's use against its quota, given to the plan only when the owner chose
/// `evict_oldest`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Eviction {
    /// Bytes the store counts against the quota now (history and journal chunks).
    pub used_bytes: u64,
    /// The quota, in bytes.
    pub quota_bytes: u64,
}

/// One chunk a plan prunes, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PruneChoice {
    /// The chunk, as its seal (or a torn chunk's records) describe it.
    pub chunk: PruneCandidate,
    /// Retention or eviction.
    pub reason: PruneReason,
}

impl PruneChoice {
    /// Its journal record (its last record's time in whole milliseconds).
    pub fn event(&self) -> JournalEvent {
        JournalEvent::ChunkPruned {
            chunk: self.chunk.chunk_id,
            reason: self.reason,
            last_time_ms: u64::try_from(self.chunk.last_time.as_millis()).unwrap_or(u64::MAX),
            records: self.chunk.records,
        }
    }
}

/// The chunks one pass prunes, oldest (lowest last sequence) first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrunePlan {
    /// The choices, oldest first.
    choices: Vec<PruneChoice>,
}

impl PrunePlan {
    /// The choices, oldest first.
    pub fn choices(&self) -> &[PruneChoice] {
        &self.choices
    }

    /// Whether nothing is to be pruned.
    pub fn is_empty(&self) -> bool {
        self.choices.is_empty()
    }

    /// The journal records to make durable before any file goes, one per chunk.
    pub fn events(&self) -> Vec<JournalEvent> {
        self.choices.iter().map(PruneChoice::event).collect()
    }
}

/// Which of `sealed` to prune (see the module docs): every chunk whose last event is older than
/// `cutoff`, then, with `eviction` and the store at its quota, the oldest others until the store
/// is at or below the low-water mark. `open_chunk` is never chosen. Pure.
pub fn plan_prune<'a>(
    sealed: impl IntoIterator<Item = &'a PruneCandidate>,
    open_chunk: Option<ChunkId>,
    cutoff: RetentionCutoff,
    eviction: Option<Eviction>,
) -> PrunePlan {
    let mut candidates: Vec<&PruneCandidate> = sealed
        .into_iter()
        .filter(|c| Some(c.chunk_id) != open_chunk)
        .collect();
    candidates.sort_by_key(|c| (c.last_sequence, c.chunk_id));
    let (expired, kept): (Vec<&PruneCandidate>, Vec<&PruneCandidate>) = candidates
        .into_iter()
        .partition(|c| !cutoff.admits(c.latest_time.unwrap_or(c.last_time)));
    let mut choices: Vec<PruneChoice> = expired
        .into_iter()
        .map(|c| PruneChoice {
            chunk: *c,
            reason: PruneReason::Retention,
        })
        .collect();
    if let Some(Eviction {
        used_bytes,
        quota_bytes,
    }) = eviction
        && used_bytes >= quota_bytes
    {
        let target = eviction_target_bytes(quota_bytes);
        let mut used = choices
            .iter()
            .fold(used_bytes, |used, c| used.saturating_sub(c.chunk.len_bytes));
        for chunk in kept {
            if used <= target {
                break;
            }
            used = used.saturating_sub(chunk.len_bytes);
            choices.push(PruneChoice {
                chunk: *chunk,
                reason: PruneReason::EvictOldest,
            });
        }
    }
    choices.sort_by_key(|c| (c.chunk.last_sequence, c.chunk.chunk_id));
    PrunePlan { choices }
}

/// Pruning failed part-way; what was recorded stays to be removed on the next attempt.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PruneError {
    /// A storage operation failed (`list`, `remove`, `sync directory`).
    #[error("{operation} failed while pruning: {source}")]
    Storage {
        /// What was being done.
        operation: &'static str,
        /// The storage error.
        source: StorageError,
    },
    /// The journal could not be read to confirm a recorded prune: nothing is removed.
    #[error("the engine journal could not be read to confirm what was pruned")]
    Journal,
}

/// The writer's view of what may be pruned and what is recorded but not yet removed. Built once
/// at open ([`Pruner::at_open`]) and told of each chunk closed since ([`Pruner::closed`]) and of
/// its seal once written ([`Pruner::seal_found`]), so a pass plans in memory and touches the disk
/// only for the chunks it chose.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruner {
    /// Present in `chunks/`, sealed (or torn, [`Pruner::add_torn`]), not recorded as pruned:
    /// the candidates.
    sealed: BTreeMap<ChunkId, PruneCandidate>,
    /// Closed since open, their seals being written: never pruned before the seal is found, but
    /// they tell [`Pruner::due`] a pass is worth its I/O.
    awaiting_seal: BTreeMap<ChunkId, PruneCandidate>,
    /// Recorded as pruned in the journal (durably), their files perhaps still present.
    recorded: BTreeSet<ChunkId>,
}

impl Pruner {
    /// The pruner of a store whose `chunks/` holds `present`, whose seals are `seals` (only
    /// verified ones count) and whose journal durably records `recorded` as pruned.
    pub fn new<'a>(
        seals: impl IntoIterator<Item = &'a Seal>,
        present: &BTreeSet<ChunkId>,
        recorded: &BTreeSet<ChunkId>,
    ) -> Self {
        let sealed = seals
            .into_iter()
            .filter(|s| present.contains(&s.chunk_id) && !recorded.contains(&s.chunk_id))
            .map(|s| (s.chunk_id, PruneCandidate::from(s)))
            .collect();
        Self {
            sealed,
            awaiting_seal: BTreeMap::new(),
            recorded: present.intersection(recorded).copied().collect(),
        }
    }

    /// [`Pruner::new`] for a writer opening the store: `chunks/` listed, the seals as
    /// [`crate::seal::read_seals`] read them (one that did not verify is never a candidate),
    /// `recorded` the journal projection's pruned set. A file is removed only on the word of
    /// the journal on disk, so when the projection names a chunk still present (a crash between
    /// its record and its removal) the journal is read again with `journal_keys`
    /// ([`pruned_chunks`]): a projection can hold a record a failed sync lost.
    pub fn at_open(
        storage: &Arc<dyn Storage>,
        seals: &[SealRead],
        recorded: &BTreeSet<ChunkId>,
        journal_keys: &JournalKeys,
    ) -> Result<Self, PruneError> {
        let present = present_chunks(storage.as_ref())?;
        let verified = || seals.iter().filter_map(|s| s.seal.as_ref().ok());
        let pruner = Self::new(verified(), &present, recorded);
        if pruner.recorded.is_empty() {
            return Ok(pruner);
        }
        let durable = pruned_chunks(storage, journal_keys).map_err(|_| PruneError::Journal)?;
        Ok(Self::new(verified(), &present, &durable))
    }

    /// A torn chunk the opening writer found (`TornTailFound::prunable`, the facts of its
    /// authenticated records) becomes a candidate like a sealed one. Not when any file in
    /// `seals` names it: a sealed chunk with bytes past its seal's length reads as torn too,
    /// and that is `verify`'s to report as replaced, never to be pruned away. Nor when the
    /// journal already records it pruned (its file is then removed by the next pass,
    /// [`Pruner::pending`]). Retention takes it once its latest event time is past the cutoff;
    /// eviction in sequence order.
    pub fn add_torn(&mut self, torn: PruneCandidate, seals: &[SealRead]) {
        let sealed = seals.iter().any(|s| s.chunk_id == Some(torn.chunk_id));
        if !sealed && !self.recorded.contains(&torn.chunk_id) {
            self.sealed.insert(torn.chunk_id, torn);
        }
    }

    /// A chunk the writer closed: its seal is being written. Until [`Pruner::seal_found`] it is
    /// no candidate.
    pub fn closed(&mut self, chunk: &ClosedChunk) {
        self.awaiting_seal.insert(
            chunk.chunk_id,
            PruneCandidate {
                chunk_id: chunk.chunk_id,
                last_sequence: chunk.last_sequence,
                last_time: chunk.last_time,
                latest_time: Some(chunk.latest_time),
                records: chunk.records,
                len_bytes: chunk.len_bytes,
            },
        );
    }

    /// The closed chunks whose seals are still to be checked.
    pub fn awaiting_seal(&self) -> Vec<ChunkId> {
        self.awaiting_seal.keys().copied().collect()
    }

    /// What reading `chunk`'s seal found once its write finished: a verified seal of that chunk
    /// makes it a candidate (with the seal's facts); no seal (the write failed) leaves it
    /// unsealed for good, never pruned.
    pub fn seal_found(&mut self, chunk: ChunkId, seal: Option<&Seal>) {
        let closed = self.awaiting_seal.remove(&chunk);
        if let Some(seal) = seal.filter(|s| s.chunk_id == chunk)
            && !self.recorded.contains(&chunk)
        {
            let mut candidate = PruneCandidate::from(seal);
            // What the writer saw while writing it, when the seal's facts are its own.
            candidate.latest_time = closed
                .filter(|c| c.last_sequence == seal.last_sequence && c.len_bytes == seal.len_bytes)
                .and_then(|c| c.latest_time);
            self.sealed.insert(chunk, candidate);
        }
    }

    /// Whether a pass may find something to prune, from what is in memory only (no I/O): a
    /// candidate or a chunk awaiting its seal that retention takes, or the store at its quota
    /// with eviction chosen and something besides the open chunk to evict.
    pub fn due(
        &self,
        open_chunk: Option<ChunkId>,
        cutoff: RetentionCutoff,
        eviction: Option<Eviction>,
    ) -> bool {
        let mut others = self
            .sealed
            .values()
            .chain(self.awaiting_seal.values())
            .filter(|c| Some(c.chunk_id) != open_chunk);
        let at_quota = eviction.is_some_and(|e| e.used_bytes >= e.quota_bytes);
        if at_quota {
            others.next().is_some()
        } else {
            others.any(|c| !cutoff.admits(c.last_time))
        }
    }

    /// The candidates, by chunk id.
    pub fn candidates(&self) -> impl Iterator<Item = &PruneCandidate> {
        self.sealed.values()
    }

    /// Whether `plan` (from [`Pruner::plan`]) would change once the seals still being written
    /// are found, so waiting for them is worth it: a chunk awaiting its seal that retention
    /// takes, or, at the quota with eviction, a plan that does not bring the store down to the
    /// low-water mark while chunks await their seals.
    pub fn needs_awaited(
        &self,
        plan: &PrunePlan,
        open_chunk: Option<ChunkId>,
        cutoff: RetentionCutoff,
        eviction: Option<Eviction>,
    ) -> bool {
        let mut awaiting = self
            .awaiting_seal
            .values()
            .filter(|c| Some(c.chunk_id) != open_chunk)
            .peekable();
        if awaiting.peek().is_none() {
            return false;
        }
        let short = eviction.is_some_and(|e| {
            let freed: u64 = plan.choices.iter().map(|c| c.chunk.len_bytes).sum();
            e.used_bytes >= e.quota_bytes
                && e.used_bytes.saturating_sub(freed) > eviction_target_bytes(e.quota_bytes)
        });
        short || awaiting.any(|c| !cutoff.admits(c.last_time))
    }

    /// What to prune now ([`plan_prune`] over the candidates). Pure.
    pub fn plan(
        &self,
        open_chunk: Option<ChunkId>,
        cutoff: RetentionCutoff,
        eviction: Option<Eviction>,
    ) -> PrunePlan {
        plan_prune(self.sealed.values(), open_chunk, cutoff, eviction)
    }

    /// `plan` without the chunks whose file is gone or no longer has its seal's length (those
    /// are forgotten: they are `verify`'s to report, never to be recorded as pruned). A chunk
    /// that cannot be checked now stays a candidate for a later pass.
    pub fn confirm_on_disk(&mut self, storage: &dyn Storage, plan: PrunePlan) -> PrunePlan {
        let mut choices = Vec::with_capacity(plan.choices.len());
        for choice in plan.choices {
            let id = choice.chunk.chunk_id;
            let len = storage
                .open_read(Area::Chunks, &chunk_file_name(id))
                .and_then(|file| file.current_len());
            match len {
                Ok(len) if len == choice.chunk.len_bytes => choices.push(choice),
                Ok(_) | Err(StorageError::NotFound) => {
                    self.sealed.remove(&id);
                }
                Err(_) => {}
            }
        }
        PrunePlan { choices }
    }

    /// `plan` without the retention choices whose records are not all expired: for each one
    /// whose latest event time is not known yet, `latest` reads it (from the chunk's index
    /// file, else a scan: [`crate::index::latest_event_time`]) and it is remembered. A chunk
    /// whose latest time cannot be read now is not pruned in this pass. Eviction choices are
    /// kept as they are (eviction goes by sequence, not time).
    pub fn confirm_latest_times(
        &mut self,
        plan: PrunePlan,
        cutoff: RetentionCutoff,
        latest: impl Fn(&PruneCandidate) -> Option<Duration>,
    ) -> PrunePlan {
        let mut choices = Vec::with_capacity(plan.choices.len());
        for mut choice in plan.choices {
            if choice.reason == PruneReason::Retention && choice.chunk.latest_time.is_none() {
                choice.chunk.latest_time = latest(&choice.chunk);
                if let (Some(time), Some(candidate)) = (
                    choice.chunk.latest_time,
                    self.sealed.get_mut(&choice.chunk.chunk_id),
                ) {
                    candidate.latest_time = Some(time);
                }
            }
            let expired = choice
                .chunk
                .latest_time
                .is_some_and(|time| !cutoff.admits(time));
            if choice.reason != PruneReason::Retention || expired {
                choices.push(choice);
            }
        }
        PrunePlan { choices }
    }

    /// The journal holds `plan`'s records durably: its chunks may now be removed.
    pub fn recorded(&mut self, plan: PrunePlan) {
        for choice in plan.choices {
            self.sealed.remove(&choice.chunk.chunk_id);
            self.recorded.insert(choice.chunk.chunk_id);
        }
    }

    /// Chunks recorded as pruned whose files are still to be removed.
    pub fn pending(&self) -> Vec<ChunkId> {
        self.recorded.iter().copied().collect()
    }

    /// Removes the files of every recorded chunk: the chunk (a file already gone is fine),
    /// `chunks/` synced, then its derived index file (best effort: an orphan is removed by the
    /// next index load). A chunk stays pending until the directory sync covering its removal
    /// returned. Returns the chunks removed.
    pub fn remove_recorded(&mut self, storage: &dyn Storage) -> Result<Vec<ChunkId>, PruneError> {
        let mut removed = Vec::new();
        let mut failed = None;
        for &chunk in &self.recorded {
            match storage.remove(Area::Chunks, &chunk_file_name(chunk)) {
                Ok(()) | Err(StorageError::NotFound) => removed.push(chunk),
                Err(source) => {
                    failed = Some(PruneError::Storage {
                        operation: "remove",
                        source,
                    });
                }
            }
        }
        if !removed.is_empty() {
            storage
                .sync_dir(Area::Chunks)
                .map_err(|source| PruneError::Storage {
                    operation: "sync directory",
                    source,
                })?;
            for chunk in &removed {
                self.recorded.remove(chunk);
            }
            if storage.has_area(Area::Index) {
                for chunk in &removed {
                    let _ = storage.remove(Area::Index, &index_file_name(*chunk));
                }
                let _ = storage.sync_dir(Area::Index);
            }
        }
        match failed {
            Some(error) => Err(error),
            None => Ok(removed),
        }
    }
}

/// The chunk ids in `chunks/` (by file name; nothing is opened).
pub fn present_chunks(storage: &dyn Storage) -> Result<BTreeSet<ChunkId>, PruneError> {
    let entries = storage
        .list(Area::Chunks)
        .map_err(|source| PruneError::Storage {
            operation: "list",
            source,
        })?;
    Ok(entries
        .iter()
        .filter_map(|e| e.name.to_str().and_then(parse_chunk_file_name))
        .collect())
}

/// Every chunk the journal on disk records as pruned (a full read and replay with the journal
/// keys). What `verify` needs to tell a pruned chunk from a missing one, and what the writer
/// trusts before removing a file recorded in an earlier life.
pub fn pruned_chunks(
    storage: &Arc<dyn Storage>,
    journal_keys: &JournalKeys,
) -> Result<BTreeSet<ChunkId>, ReadStoreError> {
    if !storage.has_area(Area::Journal) {
        return Ok(BTreeSet::new());
    }
    let report = StoreReader::<Journal>::new(Arc::clone(storage)).read(journal_keys)?;
    Ok(State::replay(report.records().map(|r| &r.event.event)).pruned)
}

/// `index` without the entries of `chunks`: what the Query actor keeps once they are pruned, so
/// no query plans a read of a removed file.
pub fn index_without(index: &Index, chunks: &BTreeSet<ChunkId>) -> Index {
    Index::from_entries(
        index
            .entries()
            .iter()
            .filter(|e| !chunks.contains(&e.location.chunk_id))
            .copied()
            .collect(),
    )
}

#[cfg(test)]
mod tests;
