//! The history writer's rules as a pure state machine. The Writer actor (`annal-actors`) keeps
//! the mailbox, the timers, the blocking threads and every I/O call; it hands [`State`] each
//! input (a batch of drained items, an append's or a sync's outcome, the group-commit tick, a
//! control operation, a setting, what an open found, what the seal jobs answered, a clean
//! stop) and carries out what comes back: [`Effect`]s (journal these events, journal this
//! signal, tell the Query actor to forget lost sequences) and plans for the steps that need an
//! awaited call (the drafts to append and the reservation before them, the journal events to
//! make durable, the seals to write, the contract's answer to write back). The given/when/then
//! tests of every rule are in `tests.rs`.
//!
//! - [`State`]: what the writer knows between messages: the journal's projection as of its
//!   last exchange with the journal, the events lost and not yet reported by a drop marker,
//!   the sequences reserved in the journal, whether the store and the key are failing (so
//!   the next success signals recovery), whether the writer is open, admission and the quota
//!   state, and the seal chain's tip.
//! - [`admission`]: whether capture admits new events ([`State::accepting`]), the quota
//!   check and its signals, what eviction and retention may prune, and the group-commit
//!   tick ([`commit_tick`]).
//! - [`contract`]: the owner's control operations ([`ControlPlan`]), one truth about on and
//!   off at open ([`State::observe_contract`], [`State::contract_answer`]), the reservation a
//!   crashed predecessor left, released when it crashed in this boot
//!   ([`State::recover_sequences`]) and skipped otherwise ([`State::record_skip`]), and the
//!   reservation a clean stop releases.
//! - [`drafts`]: each drained capture becomes a v0 draft ([`Drafter`]: keyed session ids,
//!   action ids from the channel's seed), with one drop marker before the first event after
//!   any drops ([`State::drafts`]).
//! - [`drops`]: the drop accounting of an append (`docs/design.md`, "No gap without a
//!   cause"): an [`AppendPlan`] says which sequences a batch takes, whether the journal must
//!   reserve more first ([`SEQUENCE_RESERVE_BLOCK`]), and what a failed append cost
//!   ([`BatchMarkers::lost`]): every lost event is reported by the next drop marker, never
//!   lost silently, and never reported twice; and the drops at the ends of a writer's life
//!   ([`State::owed_drops`], [`State::trailing_drops`]).
//! - [`seals`]: each closed chunk's seal chained to the tip ([`State::chain_seals`]), what
//!   the seal jobs found as signals ([`State::seal_jobs_ended`]), the checkpoint's standing
//!   from job to job ([`CheckpointSync`]), and what an open seals and journals of a crash's
//!   leftovers.
//! - [`settings`]: an owner's [`Setting`], decided by the journal's rules.
//!
//! Pure: no I/O, no clock reads, no threads.

pub mod admission;
pub mod contract;
pub mod drafts;
pub mod drops;
pub mod seals;
pub mod settings;

use std::ops::RangeInclusive;

use annal_schema::HealthCategory;

use crate::boot::BootId;
use crate::health::{KeyFault, SignalKind, StorageFault};
use crate::journal::{JournalEvent, State as Projection};

pub use admission::{Tick, commit_tick};
pub use contract::{
    ContractAnswer, ControlPlan, Observed, control_command, implied_by, narrowing_of, narrows,
};
pub use drafts::{Drafter, SESSION_ID_CACHE_ENTRIES};
pub use drops::{
    AppendPlan, BatchMarkers, FailedAppend, IN_FLIGHT_SEQUENCES_MAX, SEQUENCE_RESERVE_BLOCK,
    TrailingDrops,
};
pub use seals::{
    CheckpointAnswer, CheckpointOutcome, CheckpointStep, CheckpointSync, SealPlan,
    leftovers_to_seal, tears_to_record,
};
pub use settings::Setting;

/// What the writer carries out for the state machine, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Journal these events, durable with the journal's next tick (the writer does not wait;
    /// [`State`] applied them to its projection already).
    Record(Vec<JournalEvent>),
    /// Journal this signal, stamped with the time now.
    Signal(SignalKind),
    /// Tell the Query actor to forget these sequences: it may have answered them appended and
    /// unsynced, and no page may return an event the history reports dropped.
    ForgetLost(RangeInclusive<u64>),
}

/// The history writer's state between messages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct State {
    /// The journal's projection as of the writer's last exchange with it (enabled, paused:
    /// what capture admission needs). Status reads the journal's own, current one.
    pub projection: Projection,
    /// Events lost by this writer (a failed batch or sync) not yet reported by a drop marker.
    lost_unreported: u64,
    /// Sequences reserved in the journal so far (durable there).
    reserved_through: u64,
    /// Whether the last store operation failed (so the next success signals recovery).
    storage_failing: bool,
    /// Whether the last key load failed (so the next success signals recovery).
    key_failing: bool,
    /// Whether the history writer is open (its key loaded); never closed again in a writer's
    /// life.
    open: bool,
    /// The embedder admitted capture (`EngineConfig::admitted`).
    admitted: bool,
    /// Nothing drains the capture queue for good.
    undrained: bool,
    /// The store is at its quota: capture admits nothing new.
    at_quota: bool,
    /// The newest seal (the chain's tip): the next closed chunk's seal links to it.
    chain_tip: Option<crate::seal::Seal>,
    /// The boot this writer runs in (`None`: unknown), journaled with each reservation.
    boot: Option<BootId>,
}

impl State {
    /// The journal answered with `projection`: the truth from now on (after a failed commit,
    /// what the failure left in effect: a narrowing stays, a widening is withdrawn).
    pub fn adopt(&mut self, projection: Projection) {
        self.projection = projection;
    }

    /// No key loads, so the journal cannot be read: status shows the state file's enabled and
    /// paused, so it still says what the owner chose. Never authoritative: capture stays
    /// closed, as no writer is open.
    pub fn show_mirror(&mut self, mirror: crate::store::StateMirror) {
        self.projection.enabled = mirror.enabled;
        self.projection.paused = mirror.paused;
    }

    /// The history writer opened above `reserved_through` (the highest sequence its store
    /// holds): sequences above it are reserved before they are used.
    pub fn opened(&mut self, reserved_through: u64) {
        self.reserved_through = reserved_through;
        self.open = true;
        self.at_quota = false;
    }

    /// The boot this writer runs in (`None`: unknown; then no crash's reservation is ever
    /// released, [`State::recover_sequences`]).
    pub fn set_boot(&mut self, boot: Option<BootId>) {
        self.boot = boot;
    }

    /// Whether the history writer is open.
    pub fn is_open(&self) -> bool {
        self.open
    }

    /// Sequences reserved in the journal so far.
    pub fn reserved_through(&self) -> u64 {
        self.reserved_through
    }

    /// Events lost and not yet reported by a drop marker.
    pub fn lost_unreported(&self) -> u64 {
        self.lost_unreported
    }

    /// Takes the events lost and not yet reported, for a drop marker about to be written.
    pub fn take_lost_unreported(&mut self) -> u64 {
        std::mem::take(&mut self.lost_unreported)
    }

    /// `events` more lost, to be reported by the next drop marker.
    pub fn count_lost(&mut self, events: u64) {
        self.lost_unreported = self.lost_unreported.saturating_add(events);
    }

    /// A store operation failed with `category`: the storage signal (`storage_corrupt` or
    /// `storage_unavailable`); the next success signals recovery.
    pub fn storage_fault(&mut self, category: HealthCategory) -> Effect {
        let category = if category == HealthCategory::StorageCorrupt {
            StorageFault::StorageCorrupt
        } else {
            StorageFault::StorageUnavailable
        };
        self.storage_failing = true;
        Effect::Signal(SignalKind::StorageFailed { category })
    }

    /// A store operation succeeded: the recovery signal, if the last one failed.
    pub fn storage_ok(&mut self) -> Option<Effect> {
        std::mem::take(&mut self.storage_failing)
            .then_some(Effect::Signal(SignalKind::StorageRecovered))
    }

    /// A key operation failed with `category` (a key category; any other reads as
    /// `key_unavailable`); the next success signals recovery.
    pub fn key_fault(&mut self, category: HealthCategory) -> Effect {
        self.key_failing = true;
        let fault = KeyFault::from_health(category).unwrap_or(KeyFault::KeyUnavailable);
        Effect::Signal(SignalKind::KeyFailed { category: fault })
    }

    /// A key operation succeeded: the recovery signal, if the last one failed.
    pub fn key_ok(&mut self) -> Option<Effect> {
        std::mem::take(&mut self.key_failing).then_some(Effect::Signal(SignalKind::KeyRecovered))
    }
}

#[cfg(test)]
mod tests;
