//! Seal chaining and what the seal jobs found.
//!
//! Each chunk the writer closes is sealed in order: its seal is prepared here, chained to the
//! tip (the newest seal, [`State::chain_tip`]), and written by a job off the writer's task,
//! which then keeps the credential-store checkpoint (`seal::reconcile` on a writer's first
//! job, the seal's own checkpoint after). [`State::seal_jobs_ended`] turns what the jobs
//! answered into signals: a seal not written is `storage_unavailable` (its chunk stays
//! unsealed, which `verify` reports); a checkpoint that could not be kept is the credential
//! store's key category (a later job tries again); a seal chain older than the checkpoint is
//! `storage_corrupt`, which only a later comparison that finds the newer chain back clears.
//!
//! Where the checkpoint stands is handed from each job to the next ([`CheckpointSync`]): what
//! a job does with it ([`CheckpointSync::step`]) and what key custody's answer makes of it
//! ([`CheckpointSync::after`]) are decided here; a rolled-back chain freezes it for the rest of
//! the writer's life.
//!
//! At open, a crash's complete chunks that no seal names and whose records follow the tip are
//! sealed ([`leftovers_to_seal`]); its torn tails are journaled once ([`tears_to_record`]).

use annal_schema::HealthCategory;

use super::{Effect, State};
use crate::health::{KeyFault, SignalKind};
use crate::journal::{JournalEvent, State as Projection};
use crate::profile::ChunkId;
use crate::seal::{Seal, SealRead, prepare_seal};
use crate::store::{ClosedChunk, TornTailFound};

/// Where the checkpoint stands for one writer's life, handed from each seal job to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointSync {
    /// Not compared with the seal chain on disk yet (or the comparison could not be made).
    Unchecked,
    /// Compared, and the chain is not older: each new seal's checkpoint is stored.
    Following,
    /// The chain on disk is older than the checkpoint (the directory was replaced with an older
    /// copy): this writer never moves the checkpoint, so `verify` keeps finding the rollback
    /// however far the writer seals on.
    Frozen,
}

/// What a seal job did with the checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointOutcome {
    /// Nothing to do (no seal written, or the checkpoint frozen).
    Untouched,
    /// The checkpoint names this job's seal, or the chain's newest.
    Kept,
    /// The first comparison of this writer's life found the seal chain on disk not older than
    /// the checkpoint (which is kept, or mended to the chain's newest).
    Verified,
    /// Key custody or the seals on disk failed, with this category; a later job tries again.
    Failed(HealthCategory),
    /// The chain on disk is older than the checkpoint.
    RolledBack,
}

/// What a seal job does with the checkpoint once its seal (if any) is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointStep {
    /// Nothing: no seal written, or the checkpoint frozen, or (after the first comparison) a
    /// job with no seal of its own.
    Nothing,
    /// Compare the checkpoint with the chain on disk (`seal::reconcile`): the first
    /// comparison of this writer's life.
    Reconcile,
    /// Store this job's seal's checkpoint.
    Store,
}

/// What key custody answered a [`CheckpointStep`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointAnswer {
    /// Compared (the chain on disk is not older), or stored.
    Done,
    /// The chain on disk is older than the checkpoint; or, storing, the checkpoint moved ahead
    /// of or away from this writer's chain since it compared them (another history's writer:
    /// never follow it).
    RolledBack,
    /// Key custody or the seals on disk failed with this category (a timeout is
    /// `key_unavailable`, a chain that could not be read `storage_unavailable`).
    Failed(HealthCategory),
}

impl CheckpointSync {
    /// What a job whose seal was `written` (or that has none to write: `sealing` false) does
    /// with the checkpoint, given where the checkpoint stands.
    pub fn step(self, written: bool, sealing: bool) -> CheckpointStep {
        match (written, self) {
            (false, _) | (true, Self::Frozen) => CheckpointStep::Nothing,
            (true, Self::Unchecked) => CheckpointStep::Reconcile,
            (true, Self::Following) if sealing => CheckpointStep::Store,
            (true, Self::Following) => CheckpointStep::Nothing,
        }
    }

    /// The job's outcome, and where the checkpoint stands for the next job, after `step`
    /// was answered `answer` (`None`: no call was made).
    pub fn after(
        self,
        step: CheckpointStep,
        answer: Option<CheckpointAnswer>,
    ) -> (CheckpointOutcome, CheckpointSync) {
        match (step, answer) {
            (CheckpointStep::Nothing, _) | (_, None) => (CheckpointOutcome::Untouched, self),
            (_, Some(CheckpointAnswer::Failed(category))) => {
                (CheckpointOutcome::Failed(category), self)
            }
            (_, Some(CheckpointAnswer::RolledBack)) => {
                (CheckpointOutcome::RolledBack, Self::Frozen)
            }
            (CheckpointStep::Reconcile, Some(CheckpointAnswer::Done)) => {
                (CheckpointOutcome::Verified, Self::Following)
            }
            (CheckpointStep::Store, Some(CheckpointAnswer::Done)) => {
                (CheckpointOutcome::Kept, self)
            }
        }
    }
}

/// The seals of chunks just closed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealPlan {
    /// Each chunk and its prepared seal, in order: one seal job each, each after the one
    /// before.
    pub jobs: Vec<(ClosedChunk, Seal)>,
    /// Chunks no seal could be prepared for: never sealed, so never pruned.
    pub unsealable: Vec<ChunkId>,
    /// The storage signal when there are any.
    pub effects: Vec<Effect>,
}

impl State {
    /// The newest seal (the chain's tip): the next closed chunk's seal links to it.
    pub fn chain_tip(&self) -> Option<&Seal> {
        self.chain_tip.as_ref()
    }

    /// The tip the seals on disk end with, at open.
    pub fn set_chain_tip(&mut self, tip: Option<Seal>) {
        self.chain_tip = tip;
    }

    /// Prepares the seals of `closed`, in order, each chained to the one before.
    pub fn chain_seals(&mut self, closed: &[ClosedChunk]) -> SealPlan {
        let mut plan = SealPlan {
            jobs: Vec::new(),
            unsealable: Vec::new(),
            effects: Vec::new(),
        };
        for chunk in closed {
            match prepare_seal(chunk, self.chain_tip.as_ref()) {
                Ok(seal) => {
                    self.chain_tip = Some(seal.clone());
                    plan.jobs.push((chunk.clone(), seal));
                }
                Err(_) => plan.unsealable.push(chunk.chunk_id),
            }
        }
        if !plan.unsealable.is_empty() {
            plan.effects
                .push(self.storage_fault(HealthCategory::StorageUnavailable));
        }
        plan
    }

    /// What ended seal jobs found, as signals: `outcomes` of the jobs that answered, and
    /// `seal_failed` when a seal was not written or a job never answered.
    pub fn seal_jobs_ended(
        &mut self,
        outcomes: &[CheckpointOutcome],
        seal_failed: bool,
    ) -> Vec<Effect> {
        let mut effects = Vec::new();
        for &outcome in outcomes {
            match outcome {
                CheckpointOutcome::Untouched => {}
                CheckpointOutcome::Kept | CheckpointOutcome::Verified => {
                    effects.extend(self.key_ok());
                    // A rollback an earlier life reported no longer holds (the newer copy is
                    // back): the only thing that clears it. Signalled only then.
                    if outcome == CheckpointOutcome::Verified
                        && self
                            .projection
                            .holds(HealthCategory::StorageCorrupt, true, 0)
                    {
                        effects.push(Effect::Signal(SignalKind::CheckpointVerified));
                    }
                }
                CheckpointOutcome::Failed(category)
                    if KeyFault::from_health(category).is_some() =>
                {
                    effects.push(self.key_fault(category));
                }
                CheckpointOutcome::Failed(category) => effects.push(self.storage_fault(category)),
                CheckpointOutcome::RolledBack => {
                    effects.push(self.storage_fault(HealthCategory::StorageCorrupt));
                }
            }
        }
        if seal_failed {
            effects.push(self.storage_fault(HealthCategory::StorageUnavailable));
        }
        effects
    }
}

/// A crash's last chunks, complete but never closed, to seal at open (so they become
/// prunable and no later open reads them): those no seal file names (a mismatched seal is
/// verify's to report) and whose records follow the chain's `tip` (so the chain stays in
/// sequence order); the rest stay unsealed, as before.
pub fn leftovers_to_seal(
    unsealed: &[ClosedChunk],
    seals: &[SealRead],
    tip: Option<&Seal>,
) -> Vec<ClosedChunk> {
    let tip_last = tip.map_or(0, |s| s.last_sequence);
    unsealed
        .iter()
        .filter(|c| !seals.iter().any(|s| s.chunk_id == Some(c.chunk_id)))
        .filter(|c| c.first_sequence > tip_last)
        .cloned()
        .collect()
}

/// A crash's torn tails to journal, once each: those `projection` has not recorded, and within
/// the journal's bounds (a tear outside them is not recorded: the journal would refuse it).
/// Readers leave them out whether recorded or not.
pub fn tears_to_record(projection: &Projection, torn: &[TornTailFound]) -> Vec<JournalEvent> {
    torn.iter()
        .filter(|tear| !projection.torn_tails.contains(&tear.chunk_id))
        .map(|tear| JournalEvent::TornTailRecorded {
            chunk: tear.chunk_id,
            bytes_left_out: tear.bytes_left_out,
        })
        .filter(|event| event.check_bounds().is_ok())
        .collect()
}
