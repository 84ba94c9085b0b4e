//! Pruning as the writer carries it out: the rules are `store::Pruner`'s (what retention and
//! eviction take, given `history::State::retention_cutoff` and `history::State::eviction`);
//! the writer journals the plan durably, has the Query actor drop the chunks, then removes
//! the files. And the store's bytes, read from its directories.

use std::sync::Arc;

use annal_engine::storage::Storage;
use annal_schema::HealthCategory;

use super::{CHILD_CALL_DEADLINE_MS, WriterState};

/// Encrypted bytes of the store's chunk files, by stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct StoreBytes {
    /// The history's chunks (`computer-history/chunks/`): what the reference counts as
    /// `bytes_used`, and what the contract's status reports.
    pub(super) history: u64,
    /// annal's journal chunks (the sidecar's `engine/journal/`).
    pub(super) journal: u64,
}

impl StoreBytes {
    /// Both, read from the directories.
    pub(super) fn read(storage: &dyn Storage) -> Self {
        use annal_engine::storage::Area;
        let of = |area: Area| -> u64 {
            storage
                .list(area)
                .ok()
                .into_iter()
                .flatten()
                .filter_map(|entry| entry.file_name())
                .filter_map(|name| storage.open_read(area, &name).ok().map(|f| f.len()))
                .sum()
        };
        Self {
            history: of(Area::Chunks),
            journal: of(Area::Journal),
        }
    }

    /// What the quota counts: history and journal chunks (`docs/design.md`, "Pruning").
    pub(super) fn total(self) -> u64 {
        self.history.saturating_add(self.journal)
    }
}

impl WriterState {
    /// Tells the pruner of chunks just closed (their seals are being written).
    pub(super) fn note_closed(&mut self, closed: &[annal_engine::store::ClosedChunk]) {
        if let Some(open) = self.open.as_mut() {
            for chunk in closed {
                open.pruner.closed(chunk);
            }
        }
    }

    /// One pruning pass (`store::prune`): what retention and, with `evict_oldest` at the quota,
    /// eviction take is recorded in the journal, durably, and only then removed. A pass with
    /// nothing due touches no file. The caller checks the quota after it.
    pub(super) async fn prune(&mut self) {
        let Some(storage) = self.storage.get().cloned() else {
            return;
        };
        let (cutoff, eviction) = (self.retention_cutoff(), self.eviction());
        let Some(open) = self.open.as_ref() else {
            return;
        };
        let current = open.history.current_chunk();
        if open.pruner.due(current, cutoff, eviction) {
            let mut plan = self
                .open
                .as_ref()
                .map(|o| o.pruner.plan(current, cutoff, eviction));
            let waited = plan
                .as_ref()
                .zip(self.open.as_ref())
                .is_some_and(|(plan, o)| o.pruner.needs_awaited(plan, current, cutoff, eviction));
            if waited {
                // The seals being written would change the plan: let them finish (two syncs
                // and a checkpoint each), then plan again.
                self.reap_seal_writes(true).await;
                plan = self
                    .open
                    .as_ref()
                    .map(|o| o.pruner.plan(current, cutoff, eviction));
            }
            let plan = match (self.open.as_mut(), plan) {
                (Some(open), Some(plan)) => {
                    let plan = open.pruner.confirm_on_disk(storage.as_ref(), plan);
                    let (history, index) = (&open.keys.history, &open.keys.index);
                    open.pruner.confirm_latest_times(plan, cutoff, |chunk| {
                        annal_engine::index::latest_event_time(
                            storage.as_ref(),
                            history,
                            index,
                            chunk.chunk_id,
                            chunk.len_bytes,
                        )
                    })
                }
                _ => return,
            };
            // The records durable first: a file goes only once the journal says why.
            if !plan.is_empty()
                && self.journal(plan.events(), true).await.is_ok()
                && let Some(open) = self.open.as_mut()
            {
                open.pruner.recorded(plan);
            }
        }
        self.remove_pruned(&storage).await;
    }

    /// Removes the files of the chunks recorded as pruned. The Query actor drops them from its
    /// index first (and answers), so no query plans a read of a file about to go. A removal
    /// that fails is a storage signal; the chunk stays recorded and a later pass removes it.
    async fn remove_pruned(&mut self, storage: &Arc<dyn Storage>) {
        let pending = match self.open.as_ref() {
            Some(open) => open.pruner.pending(),
            None => return,
        };
        if pending.is_empty() {
            return;
        }
        if let Some(query) = &self.query {
            let _ = ractor::call_t!(
                query,
                |reply| crate::query::QueryMsg::Pruned {
                    chunks: pending,
                    reply
                },
                CHILD_CALL_DEADLINE_MS
            );
        }
        let removed = match self.open.as_mut() {
            Some(open) => open.pruner.remove_recorded(storage.as_ref()),
            None => return,
        };
        self.bytes = StoreBytes::read(storage.as_ref());
        if removed.is_err() {
            let _ = self.storage_fault(HealthCategory::StorageUnavailable);
        }
    }
}

/// The store's encrypted bytes as annal counts them: the contract's part and annal's sidecar
/// journal beside it. The quota counts both (`docs/design.md`, "Pruning"); the contract's
/// `bytes_used` (what the reference reports) is the history's part alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreUsage {
    /// The history's chunks (the contract store's `chunks/`): the contract's `bytes_used`.
    pub history_bytes: u64,
    /// annal's engine-journal chunks (the sidecar's `journal/`).
    pub journal_bytes: u64,
}

impl StoreUsage {
    /// What the quota counts: both.
    pub fn quota_counted_bytes(self) -> u64 {
        self.history_bytes.saturating_add(self.journal_bytes)
    }
}
