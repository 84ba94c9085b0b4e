//! The engine journal: annal's own encrypted, append-only record of every engine mutation, and
//! the engine state projected from it (ARCHITECTURE.md section 5).
//!
//! - [`schema`](mod@schema): the closed event schema ([`JournalEvent`]), its versioned stored
//!   form (`urn:annal:schema:engine-journal:v1`) and [`Journal`], its [`Stream`](crate::store::Stream)
//!   binding, so `StoreWriter::<Journal>` and `StoreReader::<Journal>` write and read
//!   `engine/journal/` with the journal keys.
//! - [`state`]: [`State`], the projection ([`State::apply`], [`State::replay`]), and
//!   [`decide`], which turns a [`Command`] into the events to append.
//!
//! - [`outbox`]: [`Outbox`], the events applied but not durable yet, and what a failed append
//!   or sync puts back to be appended again.
//! - [`failed_commit`](mod@failed_commit): what a commit that could not be made durable leaves
//!   in effect (never a widening; a narrowing at once).
//!
//! All are pure: no I/O, no clock reads (times arrive in the entries and signals).

pub mod failed_commit;
pub mod outbox;
pub mod schema;
pub mod state;

pub use failed_commit::Widenings;
pub use outbox::{OUTBOX_HELD_MAX_EVENTS, Outbox};
pub use schema::{
    BoundViolation, CallerKind, ContractSource, JOURNAL_DATASCHEMA_V1, JOURNAL_TIME_MAX_MS,
    Journal, JournalEntry, JournalEvent, JournalRecord, JournalSchema, OnQuota, PruneReason,
    QUOTA_MAX_BYTES, QUOTA_MIN_BYTES, RETENTION_MAX_DAYS, RETENTION_MIN_DAYS, TORN_TAIL_MAX_BYTES,
    quota_in_bounds, retention_in_bounds,
};
pub use state::{Command, CommandError, KeyEpoch, State, StatusFlags, StatusReading, decide};

#[cfg(test)]
mod tests;
