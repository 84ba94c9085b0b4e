//! Health: a pure fold over supervisor and store signals.
//!
//! The `health` field of `history_status` is one of the 13 fixed categories of seed 000
//! ([`HealthCategory`]). It is never stored as such: the shell turns every supervision event
//! (a child started, failed with a fixed category, was restarted, stopped, or ran out of
//! restarts) and every store and key fact into a [`Signal`], the engine journal records each one
//! (`JournalEvent::SupervisorSignalled`), and [`replay`] folds the recorded signals together with
//! the few facts that are not signals ([`HealthInputs`]) into one category. Replaying the same
//! signals always gives the same category, so health after a process restart is health before
//! it.
//!
//! # Which category wins
//!
//! Several facts may hold at once (a locked key store while capture is paused, say). The fold
//! reports the first category of [`PRECEDENCE`] that holds, highest first:
//!
//! | rank | category             | why it ranks here                                                       |
//! |-----:|----------------------|-------------------------------------------------------------------------|
//! | 1    | `not_admitted`       | the feature is off for this daemon: no other fact can be acted on       |
//! | 2    | `key_destroy_failed` | a delete may have left the key behind: the owner must act, privacy first|
//! | 3    | `key_corrupt`        | the key is wrong: nothing reads or writes, and retrying cannot help     |
//! | 4    | `key_locked`         | the owner can unlock it; until then nothing reads or writes             |
//! | 5    | `key_unavailable`    | no key: storage cannot even be checked without one                      |
//! | 6    | `storage_corrupt`    | queries fail closed until an explicit repair; not transient             |
//! | 7    | `writer_stopped`     | the supervisor gave up (or the writer stopped): no retry will fix it    |
//! | 8    | `storage_unavailable`| may be transient while the supervisor still retries                     |
//! | 9    | `quota_reached`      | the store is healthy, capture stops by rule; enabling would not help    |
//! | 10   | `disabled`           | the owner's choice; only reported when nothing is broken                |
//! | 11   | `paused`             | the owner's choice, narrower than disabled                              |
//! | 12   | `events_dropped`     | capture works but lost events that history does not yet mark            |
//! | 13   | `ready`              | nothing above holds                                                     |
//!
//! Faults rank above the owner's choices because a disabled store with a corrupt key is still a
//! store the owner must repair before enabling it makes sense; key faults rank above storage
//! faults because without the key the store cannot be read to tell its state.
//!
//! # What each signal does
//!
//! Every source (a child, the store, the key, the quota, drops) has its own state in the fold,
//! and a later signal of the same source replaces what an earlier one said:
//!
//! - `ChildFailed { child, category }`: the child is down with `category` until a later
//!   `ChildRestarted` or `ChildStarted` of the same child.
//! - `ChildStopped { child }` and `RestartLimitReached { child }`: the child is not running, and
//!   shows as its [`Child::down_category`] (the writer and ingress: `writer_stopped`) until a
//!   later `ChildStarted` or `ChildRestarted` of it. A failure before a give-up keeps counting
//!   too (the more specific cause may rank higher).
//! - `StorageFailed` / `StorageRecovered`, `KeyFailed` / `KeyRecovered`: a failure adds its
//!   category; the matching recovery clears every earlier failure of that source, except
//!   `storage_corrupt`: a write that succeeds says nothing about a store rolled back to an older
//!   copy, so only `CheckpointVerified` (the seal chain compared with the credential-store
//!   checkpoint and found not older) clears it.
//! - `QuotaReached` / `QuotaCleared`: capture is at the quota, or no longer.
//! - `DropsObserved { count }` / `DropsMarked { count }`: `count` drops were counted in the
//!   lifetime total with no history `health{events_dropped}` event marking them yet (what the
//!   supervisor took off the capture queue once it gave up on the writer); later a writer wrote
//!   that event. `events_dropped` shows while any drop is pending: observed and not yet marked,
//!   or still in the capture counter ([`HealthInputs::pending_drops`]). The lifetime total is a separate
//!   figure (`dropped_events`, from the journal's state), so health returns to `ready` once
//!   every drop is marked.
//!
//! Disabling and pausing never stop a child (the writer idles), so a stopped child is always
//! a fact worth reporting. `docs/health.md` has the same rules with the state and restart
//! decisions beside them.

use annal_schema::HealthCategory;
use serde::{Deserialize, Serialize};

/// The categories in precedence order, highest first: [`replay`] reports the first that holds.
/// `ready` is last and always holds.
pub const PRECEDENCE: [HealthCategory; 13] = [
    HealthCategory::NotAdmitted,
    HealthCategory::KeyDestroyFailed,
    HealthCategory::KeyCorrupt,
    HealthCategory::KeyLocked,
    HealthCategory::KeyUnavailable,
    HealthCategory::StorageCorrupt,
    HealthCategory::WriterStopped,
    HealthCategory::StorageUnavailable,
    HealthCategory::QuotaReached,
    HealthCategory::Disabled,
    HealthCategory::Paused,
    HealthCategory::EventsDropped,
    HealthCategory::Ready,
];

/// The rank of `category` in [`PRECEDENCE`] (0 is the highest).
pub fn rank(category: HealthCategory) -> usize {
    PRECEDENCE
        .iter()
        .position(|c| *c == category)
        .unwrap_or(PRECEDENCE.len())
}

/// A supervised child of the actor tree (ARCHITECTURE.md section 4). Closed: a signal never
/// names a child by a free-form string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Child {
    /// Owns the live chunk and assigns sequences.
    Writer,
    /// Drains the capture queue into the writer.
    Ingress,
    /// Holds the root key and derives purpose keys.
    KeyCustody,
    /// Serves bounded reads.
    Query,
    /// Appends the audit records of gated operations.
    AuditJournal,
    /// Decides every agent and CLI operation.
    PolicyGate,
}

impl Child {
    /// Every child, in start order (the supervisor starts them in this order and stops them in
    /// reverse; `supervision::DEPENDS_ON` only ever names a child that comes earlier).
    pub const ALL: [Child; 6] = [
        Self::KeyCustody,
        Self::AuditJournal,
        Self::Query,
        Self::PolicyGate,
        Self::Writer,
        Self::Ingress,
    ];

    /// The child's fixed name, as the journal's signals write it (`key_custody`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Writer => "writer",
            Self::Ingress => "ingress",
            Self::KeyCustody => "key_custody",
            Self::Query => "query",
            Self::AuditJournal => "audit_journal",
            Self::PolicyGate => "policy_gate",
        }
    }

    /// The category health shows while this child is not running (stopped, or given up on):
    /// the writer and ingress are the capture path (`writer_stopped`); without key custody
    /// there is no key (`key_unavailable`); without the query, audit or policy child history
    /// cannot be read (`storage_unavailable`, the nearest fixed category).
    pub const fn down_category(self) -> HealthCategory {
        match self {
            Self::Writer | Self::Ingress => HealthCategory::WriterStopped,
            Self::KeyCustody => HealthCategory::KeyUnavailable,
            Self::Query | Self::AuditJournal | Self::PolicyGate => {
                HealthCategory::StorageUnavailable
            }
        }
    }

    const fn index(self) -> usize {
        match self {
            Self::KeyCustody => 0,
            Self::AuditJournal => 1,
            Self::Writer => 2,
            Self::Ingress => 3,
            Self::PolicyGate => 4,
            Self::Query => 5,
        }
    }
}

/// The fixed category a child failure carries: the health categories a failing child can
/// cause. A failure with no more specific cause (a panic, an unexpected exit) carries the
/// child's [`Child::down_category`] through [`FailureCategory::for_crash`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FailureCategory {
    /// The key could not be loaded.
    KeyUnavailable,
    /// The credential store is locked.
    KeyLocked,
    /// The key or its reference is invalid.
    KeyCorrupt,
    /// The store could not be read or written.
    StorageUnavailable,
    /// The store failed validation.
    StorageCorrupt,
    /// The capture path is not running.
    WriterStopped,
}

impl FailureCategory {
    /// The health category this failure shows as (the same name).
    pub const fn health(self) -> HealthCategory {
        match self {
            Self::KeyUnavailable => HealthCategory::KeyUnavailable,
            Self::KeyLocked => HealthCategory::KeyLocked,
            Self::KeyCorrupt => HealthCategory::KeyCorrupt,
            Self::StorageUnavailable => HealthCategory::StorageUnavailable,
            Self::StorageCorrupt => HealthCategory::StorageCorrupt,
            Self::WriterStopped => HealthCategory::WriterStopped,
        }
    }

    /// The category of a failure without a more specific cause (a panic): the child's
    /// [`Child::down_category`].
    pub const fn for_crash(child: Child) -> Self {
        match child {
            Child::Writer | Child::Ingress => Self::WriterStopped,
            Child::KeyCustody => Self::KeyUnavailable,
            Child::Query | Child::AuditJournal | Child::PolicyGate => Self::StorageUnavailable,
        }
    }
}

/// The fixed category of a store failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StorageFault {
    /// The store cannot be read or written (`storage_unavailable`).
    StorageUnavailable,
    /// Framing, schema, sequence or authentication validation failed (`storage_corrupt`).
    StorageCorrupt,
}

impl StorageFault {
    /// The health category (the same name).
    pub const fn health(self) -> HealthCategory {
        match self {
            Self::StorageUnavailable => HealthCategory::StorageUnavailable,
            Self::StorageCorrupt => HealthCategory::StorageCorrupt,
        }
    }
}

/// The fixed category of a key custody failure (`KeyError::category` gives one of these).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum KeyFault {
    /// The key cannot be loaded (`key_unavailable`).
    KeyUnavailable,
    /// The credential store is locked (`key_locked`).
    KeyLocked,
    /// The key or its reference is invalid (`key_corrupt`).
    KeyCorrupt,
    /// Destroying the key could not be verified (`key_destroy_failed`).
    KeyDestroyFailed,
}

impl KeyFault {
    /// The health category (the same name).
    pub const fn health(self) -> HealthCategory {
        match self {
            Self::KeyUnavailable => HealthCategory::KeyUnavailable,
            Self::KeyLocked => HealthCategory::KeyLocked,
            Self::KeyCorrupt => HealthCategory::KeyCorrupt,
            Self::KeyDestroyFailed => HealthCategory::KeyDestroyFailed,
        }
    }

    /// The key fault of a health category, when it is one of the four key categories.
    pub const fn from_health(category: HealthCategory) -> Option<Self> {
        match category {
            HealthCategory::KeyUnavailable => Some(Self::KeyUnavailable),
            HealthCategory::KeyLocked => Some(Self::KeyLocked),
            HealthCategory::KeyCorrupt => Some(Self::KeyCorrupt),
            HealthCategory::KeyDestroyFailed => Some(Self::KeyDestroyFailed),
            _ => None,
        }
    }
}

/// One supervision or store fact, at the (injected) time the shell observed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Signal {
    /// When it was observed, in milliseconds since the Unix epoch (from the injected clock).
    pub at_ms: u64,
    /// What was observed.
    pub kind: SignalKind,
}

/// What a [`Signal`] says. Closed, and every category in it is a fixed typed value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SignalKind {
    /// The child started (at engine start, or a fresh start after a give-up).
    ChildStarted {
        /// Which child.
        child: Child,
    },
    /// The child failed with a fixed category.
    ChildFailed {
        /// Which child.
        child: Child,
        /// Why, as a fixed category.
        category: FailureCategory,
    },
    /// The supervisor restarted the child after a failure.
    ChildRestarted {
        /// Which child.
        child: Child,
    },
    /// The child stopped in an orderly way (shutdown).
    ChildStopped {
        /// Which child.
        child: Child,
    },
    /// The supervisor gave up restarting the child (restart intensity exceeded).
    RestartLimitReached {
        /// Which child.
        child: Child,
    },
    /// A store operation failed with a fixed category.
    StorageFailed {
        /// The category.
        category: StorageFault,
    },
    /// The store works again (a write or sync succeeded after a failure); clears
    /// `storage_unavailable`. Not `storage_corrupt`, which no write can mend.
    StorageRecovered,
    /// The seal chain on disk was compared with the credential-store checkpoint and is not
    /// older than it (a writer's first comparison in its life); clears `storage_corrupt`, which
    /// a rolled-back store raises.
    CheckpointVerified,
    /// A key custody operation failed with a fixed category.
    KeyFailed {
        /// The category.
        category: KeyFault,
    },
    /// The key works again; clears every earlier key failure.
    KeyRecovered,
    /// Capture reached the quota.
    QuotaReached,
    /// Capture is below the quota again (eviction, a larger quota, a prune).
    QuotaCleared,
    /// This many drops are in the lifetime total with no history marker yet (the supervisor
    /// took them off the capture queue once it gave up on the writer); pending until marked.
    DropsObserved {
        /// How many events were dropped (>= 1).
        count: u64,
    },
    /// The writer wrote the history event marking this many drops.
    DropsMarked {
        /// How many drops the history event marks (>= 1).
        count: u64,
    },
}

/// The facts health needs that are not signals: they come from configuration, the journal's
/// state projection and the live capture counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HealthInputs {
    /// The daemon admits the history feature.
    pub admitted: bool,
    /// The owner enabled capture (journal state).
    pub enabled: bool,
    /// The owner paused capture (journal state).
    pub paused: bool,
    /// Drops counted by capture and not yet taken by the writer.
    pub pending_drops: u64,
}

/// The folded state of every signal source: fixed size, however many signals were folded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HealthFold {
    /// Per child (by start order): the category of its unrecovered failure.
    failed: [Option<FailureCategory>; 6],
    /// Per child: not running (stopped, or given up on), until started or restarted.
    down: [bool; 6],
    /// Unrecovered storage failures: unavailable, corrupt.
    storage: [bool; 2],
    /// Unrecovered key failures: unavailable, locked, corrupt, destroy failed.
    key: [bool; 4],
    /// Capture is at the quota.
    quota_reached: bool,
    /// Drops observed and not yet marked.
    pending_drops: u64,
}

impl HealthFold {
    /// Drops observed and not yet marked: what the next writer owes the history a marker for.
    pub fn unmarked_drops(&self) -> u64 {
        self.pending_drops
    }

    /// Whether a key failure (unavailable, locked or corrupt) is still outstanding that a
    /// successful load of the key ends: a writer that has just loaded its key signals
    /// `KeyRecovered` when this holds, since the generation or process that signalled the
    /// failure is gone and nothing else would clear it. A failed destroy is not ended by a
    /// load, so it keeps this false (and the recovery waits for what clears it).
    pub fn key_load_ends_a_failure(&self) -> bool {
        let [unavailable, locked, corrupt, destroy_failed] = self.key;
        (unavailable || locked || corrupt) && !destroy_failed
    }

    /// Folds one signal in.
    pub fn apply(&mut self, signal: &Signal) {
        match signal.kind {
            SignalKind::ChildStarted { child } | SignalKind::ChildRestarted { child } => {
                self.failed[child.index()] = None;
                self.down[child.index()] = false;
            }
            SignalKind::ChildFailed { child, category } => {
                self.failed[child.index()] = Some(category);
            }
            SignalKind::ChildStopped { child } | SignalKind::RestartLimitReached { child } => {
                self.down[child.index()] = true;
            }
            SignalKind::StorageFailed { category } => {
                self.storage[storage_index(category)] = true;
            }
            SignalKind::StorageRecovered => {
                self.storage[storage_index(StorageFault::StorageUnavailable)] = false;
            }
            SignalKind::CheckpointVerified => {
                self.storage[storage_index(StorageFault::StorageCorrupt)] = false;
            }
            SignalKind::KeyFailed { category } => self.key[key_index(category)] = true,
            SignalKind::KeyRecovered => self.key = [false; 4],
            SignalKind::QuotaReached => self.quota_reached = true,
            SignalKind::QuotaCleared => self.quota_reached = false,
            SignalKind::DropsObserved { count } => {
                self.pending_drops = self.pending_drops.saturating_add(count);
            }
            SignalKind::DropsMarked { count } => {
                self.pending_drops = self.pending_drops.saturating_sub(count);
            }
        }
    }

    /// Whether `category` holds, given the signals folded so far and `inputs`.
    pub fn holds(&self, category: HealthCategory, inputs: &HealthInputs) -> bool {
        let from_children = Child::ALL.iter().any(|child| {
            let i = child.index();
            self.failed[i].is_some_and(|f| f.health() == category)
                || (self.down[i] && child.down_category() == category)
        });
        from_children
            || match category {
                HealthCategory::Ready => true,
                HealthCategory::NotAdmitted => !inputs.admitted,
                HealthCategory::Disabled => !inputs.enabled,
                HealthCategory::Paused => inputs.paused,
                HealthCategory::EventsDropped => inputs.pending_drops > 0 || self.pending_drops > 0,
                HealthCategory::QuotaReached => self.quota_reached,
                HealthCategory::StorageUnavailable => self.storage[0],
                HealthCategory::StorageCorrupt => self.storage[1],
                HealthCategory::KeyUnavailable => self.key[0],
                HealthCategory::KeyLocked => self.key[1],
                HealthCategory::KeyCorrupt => self.key[2],
                HealthCategory::KeyDestroyFailed => self.key[3],
                HealthCategory::WriterStopped => false,
            }
    }

    /// The category health shows: the first of [`PRECEDENCE`] that holds.
    pub fn category(&self, inputs: &HealthInputs) -> HealthCategory {
        PRECEDENCE
            .into_iter()
            .find(|c| self.holds(*c, inputs))
            .unwrap_or(HealthCategory::Ready)
    }
}

const fn storage_index(fault: StorageFault) -> usize {
    match fault {
        StorageFault::StorageUnavailable => 0,
        StorageFault::StorageCorrupt => 1,
    }
}

const fn key_index(fault: KeyFault) -> usize {
    match fault {
        KeyFault::KeyUnavailable => 0,
        KeyFault::KeyLocked => 1,
        KeyFault::KeyCorrupt => 2,
        KeyFault::KeyDestroyFailed => 3,
    }
}

/// Health after `signals` (in journal order), with the non-signal facts `inputs`: a pure fold.
pub fn replay(inputs: HealthInputs, signals: &[Signal]) -> HealthCategory {
    fold(signals).category(&inputs)
}

/// Every signal of `signals` (in journal order) folded: what [`replay`] ranks, and what a
/// caller asks [`HealthFold::holds`] of one category.
pub fn fold(signals: &[Signal]) -> HealthFold {
    let mut fold = HealthFold::default();
    for signal in signals {
        fold.apply(signal);
    }
    fold
}

#[cfg(test)]
mod tests;
