//! Seal jobs: each seal the rules prepared (`history::State::chain_seals`) is written by a
//! task of its own (the file on a blocking thread, then the checkpoint through key custody),
//! each after the one before, handing the checkpoint's standing (`history::CheckpointSync`)
//! on; what they found goes back to the rules (`history::State::seal_jobs_ended`).

use std::sync::Arc;

use annal_engine::history::{CheckpointAnswer, CheckpointOutcome, CheckpointStep, CheckpointSync};
use annal_engine::storage::Storage;
use annal_schema::HealthCategory;
use ractor::ActorRef;

use super::WriterState;
use crate::key_custody::KeyCustodyMsg;

/// A seal job in flight, with the seal it writes: when it ends, the pruner learns from it
/// whether the chunk is sealed (no need to read the file back).
pub(super) struct SealWrite {
    /// The chunk and the seal the job writes; `None` for a job that only compares the
    /// checkpoint.
    pub(super) sealing: Option<(annal_engine::profile::ChunkId, annal_engine::seal::Seal)>,
    /// The job.
    pub(super) task: tokio::task::JoinHandle<SealOutcome>,
}

/// What one seal job did.
#[derive(Debug)]
pub(super) struct SealOutcome {
    /// Its seal file could not be written (the chunk stays unsealed; `verify` reports it).
    pub(super) seal_failed: bool,
    /// What became of the checkpoint.
    pub(super) checkpoint: CheckpointOutcome,
}

/// What a seal job needs besides its seal.
pub(super) struct SealJob {
    /// The store's storage.
    pub(super) storage: Arc<dyn Storage>,
    /// The seal key.
    pub(super) key: Arc<annal_engine::seal::SealKey>,
    /// Key custody, which keeps the checkpoint.
    pub(super) keys: ActorRef<KeyCustodyMsg>,
    /// How long a key custody call may take, in milliseconds.
    pub(super) deadline_ms: u64,
    /// The chunk and its prepared seal; `None` for a job that only compares the checkpoint.
    pub(super) seal: Option<(annal_engine::store::ClosedChunk, annal_engine::seal::Seal)>,
}

impl SealJob {
    /// Waits for the job before, writes the seal (if any) and then keeps the checkpoint: the
    /// first job of a writer's life compares it with every verified seal on disk
    /// (`seal::reconcile`), later ones store their seal's checkpoint. Hands the checkpoint's
    /// standing on through `done`.
    async fn run(
        self,
        prior: Option<tokio::sync::oneshot::Receiver<CheckpointSync>>,
        done: tokio::sync::oneshot::Sender<CheckpointSync>,
    ) -> SealOutcome {
        use annal_engine::seal::{Checkpoint, CheckpointError, Reconciled};
        let sync = match prior {
            Some(prior) => prior.await.unwrap_or(CheckpointSync::Unchecked),
            None => CheckpointSync::Unchecked,
        };
        let sealing = self.seal.is_some();
        let checkpoint = self.seal.as_ref().map(|(_, seal)| Checkpoint::of(seal));
        let check = sync == CheckpointSync::Unchecked;
        let (storage, key, seal) = (self.storage, self.key, self.seal);
        let (written, chain) = tokio::task::spawn_blocking(move || {
            let written = seal.as_ref().is_none_or(|(chunk, seal)| {
                annal_engine::seal::write_seal(storage.as_ref(), chunk, seal, &key).is_ok()
            });
            // Read after the write, so the chain ends with this job's seal.
            let chain = (written && check)
                .then(|| annal_engine::seal::read_seals(storage.as_ref(), &key).ok())
                .flatten()
                .map(|reads| {
                    reads
                        .iter()
                        .filter_map(|read| read.seal.as_ref().ok())
                        .map(Checkpoint::of)
                        .collect::<Vec<_>>()
                });
            (written, chain)
        })
        .await
        .unwrap_or((false, None));
        let deadline = self.deadline_ms;
        let step = sync.step(written, sealing);
        let answer = match (step, chain, checkpoint) {
            (CheckpointStep::Reconcile, None, _) => {
                Some(CheckpointAnswer::Failed(HealthCategory::StorageUnavailable))
            }
            (CheckpointStep::Reconcile, Some(chain), _) => Some(
                match ractor::call_t!(
                    self.keys,
                    |reply| KeyCustodyMsg::ReconcileCheckpoint { chain, reply },
                    deadline
                ) {
                    Ok(Ok(Reconciled::RolledBack { .. })) => CheckpointAnswer::RolledBack,
                    Ok(Ok(_)) => CheckpointAnswer::Done,
                    Ok(Err(error)) => CheckpointAnswer::Failed(error.category()),
                    Err(_) => CheckpointAnswer::Failed(HealthCategory::KeyUnavailable),
                },
            ),
            (CheckpointStep::Store, _, Some(checkpoint)) => Some(
                match ractor::call_t!(
                    self.keys,
                    |reply| KeyCustodyMsg::StoreCheckpoint { checkpoint, reply },
                    deadline
                ) {
                    Ok(Ok(())) => CheckpointAnswer::Done,
                    // Moved ahead of or away from this writer's chain since it compared them:
                    // another history's writer. Never follow it.
                    Ok(Err(
                        CheckpointError::WouldGoBack { .. } | CheckpointError::Diverged { .. },
                    )) => CheckpointAnswer::RolledBack,
                    Ok(Err(error)) => CheckpointAnswer::Failed(error.category()),
                    Err(_) => CheckpointAnswer::Failed(HealthCategory::KeyUnavailable),
                },
            ),
            _ => None,
        };
        let (outcome, sync) = sync.after(step, answer);
        let _ = done.send(sync);
        SealOutcome {
            seal_failed: sealing && !written,
            checkpoint: outcome,
        }
    }
}

impl WriterState {
    /// Seals the chunks just closed (synced at rotation): each seal is prepared here, in order
    /// (the next one chains to it); a seal job writes its file on a blocking thread and then
    /// stores its checkpoint through key custody (seal first, checkpoint after: a crash between
    /// leaves the checkpoint behind, which `verify` accepts). Jobs run one after another, in
    /// ordinal order. A seal that cannot be written is a storage signal; the chunk stays
    /// readable and `verify` reports it as unsealed.
    pub(super) async fn seal(&mut self, closed: &[annal_engine::store::ClosedChunk]) {
        use tracing::Instrument;
        if closed.is_empty() {
            return self.seal_closed(closed).await;
        }
        let span = crate::telemetry::span::seal(closed.len());
        self.seal_closed(closed).instrument(span).await;
    }

    /// [`Self::seal`]'s work, inside its span.
    async fn seal_closed(&mut self, closed: &[annal_engine::store::ClosedChunk]) {
        // Awaited by the pruner until its seal job answers.
        self.note_closed(closed);
        let Some(storage) = self.storage.get().cloned() else {
            return;
        };
        if let Some(open) = self.open.as_mut() {
            let plan = self.rules.chain_seals(closed);
            for &chunk in &plan.unsealable {
                // Never sealed, so never pruned.
                open.pruner.seal_found(chunk, None);
            }
            let key = Arc::clone(&open.keys.seal);
            for seal in plan.jobs {
                self.chain_seal_job(Arc::clone(&storage), Arc::clone(&key), Some(seal));
            }
            self.carry_out(plan.effects);
        }
        self.reap_seal_writes(false).await;
    }

    /// Starts a seal job after the newest one (`seal`: `None` for a job that only compares the
    /// checkpoint with the chain).
    pub(super) fn chain_seal_job(
        &mut self,
        storage: Arc<dyn Storage>,
        key: Arc<annal_engine::seal::SealKey>,
        seal: Option<(annal_engine::store::ClosedChunk, annal_engine::seal::Seal)>,
    ) {
        let job = SealJob {
            storage,
            key,
            keys: self.keys.clone(),
            deadline_ms: annal_engine::clock::millis(self.config.key_call_deadline)
                .saturating_add(1_000),
            seal,
        };
        let sealing = job
            .seal
            .as_ref()
            .map(|(chunk, seal)| (chunk.chunk_id, seal.clone()));
        let (done, tail) = tokio::sync::oneshot::channel();
        let prior = self.checkpoint_tail.replace(tail);
        self.seal_writes.push(SealWrite {
            sealing,
            task: tokio::spawn(async move { job.run(prior, done).await }),
        });
    }

    /// Collects the seal jobs that finished (all of them, waiting, when `all`) and signals what
    /// they found: a seal not written is a storage fault (its chunk stays unsealed, which
    /// `verify` reports); a checkpoint that could not be kept is a key fault with the credential
    /// store's category (a later job tries again); a seal chain older than the checkpoint is
    /// `storage_corrupt`. The first call of an open writer's life (its first tick, or its stop)
    /// starts the job comparing the checkpoint with the chain on disk if no seal job did, so a
    /// checkpoint a crash lost is mended, and a rolled-back directory found, in every writer's
    /// life, not only at its next seal.
    pub(super) async fn reap_seal_writes(&mut self, all: bool) {
        if self.checkpoint_tail.is_none()
            && let (Some(storage), Some(open)) = (self.storage.get().cloned(), self.open.as_ref())
        {
            let key = Arc::clone(&open.keys.seal);
            self.chain_seal_job(storage, key, None);
        }
        let mut seal_failed = false;
        let mut outcomes = Vec::new();
        let mut still_running = Vec::new();
        for write in std::mem::take(&mut self.seal_writes) {
            if !(all || write.task.is_finished()) {
                still_running.push(write);
                continue;
            }
            let outcome = write.task.await.ok();
            // The pruner learns what the job did: its seal written (and synced), or not.
            if let (Some((chunk, seal)), Some(open)) = (&write.sealing, self.open.as_mut()) {
                let written = outcome.as_ref().is_some_and(|o| !o.seal_failed);
                open.pruner.seal_found(*chunk, written.then_some(seal));
            }
            match outcome {
                Some(outcome) => outcomes.push(outcome),
                None => seal_failed = true,
            }
        }
        self.seal_writes = still_running;
        let mut checkpoints = Vec::with_capacity(outcomes.len());
        for outcome in outcomes {
            seal_failed |= outcome.seal_failed;
            checkpoints.push(outcome.checkpoint);
        }
        let effects = self.rules.seal_jobs_ended(&checkpoints, seal_failed);
        self.carry_out(effects);
    }
}
