//! Engine state: a projection of the journal, and the decisions that append to it.
//!
//! [`decide`] takes the current [`State`], a [`Command`] and who asked, and returns the events
//! to append (or a typed refusal); [`State::apply`] folds one event in and never fails. The
//! shell appends what `decide` returned, syncs, then applies: state is never changed by anything
//! but an event, so [`State::replay`] of the journal gives the state back after a restart.
//!
//! # Decisions
//!
//! | command                      | allowed callers              | refused when                        | no event when        |
//! |------------------------------|------------------------------|-------------------------------------|----------------------|
//! | `Enable`                     | owner CLI, embedder          |                                     | already enabled      |
//! | `Disable`                    | owner CLI, embedder          |                                     | already disabled     |
//! | `Pause`                      | owner CLI, embedder          | disabled                            | already paused       |
//! | `Resume`                     | owner CLI, embedder          | disabled                            | not paused           |
//! | `Flush`                      | owner CLI, embedder, daemon  |                                     | (always an event)    |
//! | `SetRetention { days }`      | owner CLI, embedder          | days outside 1..=3650               | unchanged            |
//! | `SetQuota { bytes, .. }`     | owner CLI, embedder          | bytes outside 1 MiB..=1 TiB         | unchanged            |
//! | `RecordDrops { count }`      | daemon                       |                                     | count 0              |
//! | `MarkSequence { high_water, boot }`| daemon                       | 0, or below the current mark        | equal to the mark    |
//! | `StartKeyEpoch { .. }`       | daemon                       | epoch not above the current one     | same epoch and name  |
//! | `RecordSignal(signal)`       | daemon                       | signal out of bounds                |                      |
//! | `ObserveContract { .. }`     | daemon                       | out of bounds                       | a control event at or below the one read last; a state file that does not narrow |
//! | `ReleaseSequences { high_water }` | daemon                  |                                     | 0, or not below the mark |
//! | `RecoverSequences { boot, on_disk }` | daemon               |                                     | the reservation not made in `boot`; nothing on disk, lost or skipped; not below the mark |
//! | `SkipAfterCrash { on_disk }` | daemon                       |                                     | no in-flight bound journaled; nothing to release (then `RecordSkip`) |
//! | `RecordSkip { first, last }` | daemon                       | empty or starting at 0              | already recorded skipped or lost |
//!
//! An agent may never change engine state: every command from [`CallerKind::Agent`] is
//! refused. Repeating a state change is an idempotent no-op with no event, because the journal
//! records mutations and a repeated `enable` mutates nothing (the audit journal, not this
//! state, records that the operation was asked for). `Flush` changes no state but is an
//! acknowledged operation, so it is always recorded. `Disable` also clears `paused`: while
//! disabled the store is never paused, and a later `Enable` starts capturing.
//!
//! # Applying
//!
//! `apply` is total. An event outside its bounds (which neither the writer nor the reader lets
//! through) changes nothing; a `SequenceMarked` below the current mark and a `KeyEpochStarted`
//! not above the current epoch change nothing (neither ever goes backwards);
//! `ControlApplied { Delete }` returns capture to disabled and not paused; a torn tail adds the
//! chunk to the recorded set once (readers still leave the tail out by themselves); a
//! quarantine adds the chunk to the quarantined set once; a prune adds the chunk to the pruned
//! set once (its file may still be there after a crash: `store::prune` removes it then); a
//! contract observation narrows (`disable`, `delete`: disabled; `pause`: paused while enabled)
//! and never widens, and a control event's moves [`State::contract_read_through`] up; a
//! `SequenceMarked` at or above the mark takes it with its boot; a
//! `SequenceReleased` lowers the mark to its `high_water` (and forgets the boot) only while the
//! mark is still the reservation it names (so a release appended late, after a newer reservation, changes
//! nothing); a skip adds its range to [`State::skipped`].

use std::collections::BTreeSet;
use std::num::NonZeroU64;

use annal_schema::ControlOperation;

use crate::boot::BootId;
use annal_schema::tools::{DEFAULT_QUOTA_BYTES, DEFAULT_RETENTION_DAYS};

use super::schema::{
    CallerKind, ContractSource, JournalEvent, OnQuota, QUOTA_MAX_BYTES, QUOTA_MIN_BYTES,
    RETENTION_MAX_DAYS, RETENTION_MIN_DAYS, check_signal, quota_in_bounds, retention_in_bounds,
};
use annal_schema::HealthCategory;

use crate::health::{Child, HealthFold, HealthInputs, Signal};
use crate::keys::KeyReference;
use crate::policy::PolicyState;
use crate::profile::ChunkId;
use crate::supervision::RestartHistories;

/// The key epoch chunks are currently sealed under.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyEpoch {
    /// The epoch (>= 1).
    pub epoch: NonZeroU64,
    /// The credential-store name of its root key.
    pub reference: KeyReference,
}

/// The engine's state, as the journal's events made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    /// The owner enabled capture.
    pub enabled: bool,
    /// The owner paused capture (never while disabled).
    pub paused: bool,
    /// Query-visible retention, in days.
    pub retention_days: u32,
    /// Encrypted store quota, in bytes.
    pub quota_bytes: u64,
    /// What capture does at the quota.
    pub on_quota: OnQuota,
    /// Events the capture path dropped, over the store's life.
    pub dropped_total: u64,
    /// The history sequences reserved (handed out or about to be) through this mark: a writer
    /// starts above it. Only a clean stop's release lowers it, to the last sequence handed out.
    pub history_high_water: Option<u64>,
    /// The boot the reservation at [`State::history_high_water`] was made in (`None`: not
    /// journaled, or the mark is no reservation, after a release).
    pub history_mark_boot: Option<BootId>,
    /// The mark before the reservation at [`State::history_high_water`] raised it: the
    /// reserving writer's floor at open was at most this, or the store held more.
    pub history_mark_from: u64,
    /// The in-flight bound of the writer that made that reservation (`None`: not journaled).
    pub history_mark_in_flight_max: Option<u64>,
    /// The current key epoch, once one was recorded.
    pub key_epoch: Option<KeyEpoch>,
    /// Every supervision and store signal folded in, in journal order: health is this fold
    /// with the live inputs. Its size is fixed however many signals a long-lived store
    /// journals (the signals themselves are not kept: status and open never replay a list).
    pub health_fold: HealthFold,
    /// Every child's restarts since its last give-up, for the restart decision.
    pub restarts: RestartHistories,
    /// Chunks quarantined by a repair, in the order they were quarantined.
    pub quarantined: Vec<ChunkId>,
    /// History sequences reported lost (a failed append or sync), in sequence order, adjacent
    /// and overlapping ranges merged: counted as dropped, so no query answers them even where a
    /// failed sync left them on disk. One range per failure, so a handful in a store's life.
    pub lost: Vec<std::ops::RangeInclusive<u64>>,
    /// Chunks whose torn tail was recorded, once each, in the order they were recorded (so a
    /// restart does not record the same tear again).
    pub torn_tails: Vec<ChunkId>,
    /// Sealed history chunks recorded as pruned (by retention or eviction): their files are
    /// removed, or are to be after a crash, and `verify` reports them as pruned, not missing.
    /// A set: a store prunes a chunk every few minutes for as long as it lives.
    pub pruned: BTreeSet<ChunkId>,
    /// Grants, revocations, the agents switch and the audit counter.
    pub policy: PolicyState,
    /// The highest `data.sequence` of a history control event whose lifecycle operation was
    /// taken into account at an open (0: none yet): an open reads only newer ones.
    pub contract_read_through: u64,
    /// History sequences skipped at an open after a writer that did not stop cleanly (its
    /// reservation), in sequence order, merged: gaps with a cause, apart from drops. One range
    /// per crash.
    pub skipped: Vec<std::ops::RangeInclusive<u64>>,
}

impl Default for State {
    /// The contract defaults: disabled, not paused, 7 days, 104857600 bytes, capture stops at
    /// the quota, nothing dropped, no sequence handed out, no key epoch, no signals.
    fn default() -> Self {
        Self {
            enabled: false,
            paused: false,
            retention_days: DEFAULT_RETENTION_DAYS,
            quota_bytes: DEFAULT_QUOTA_BYTES,
            on_quota: OnQuota::StopCapture,
            dropped_total: 0,
            history_high_water: None,
            history_mark_boot: None,
            history_mark_from: 0,
            history_mark_in_flight_max: None,
            key_epoch: None,
            health_fold: HealthFold::default(),
            restarts: RestartHistories::default(),
            quarantined: Vec::new(),
            lost: Vec::new(),
            torn_tails: Vec::new(),
            pruned: BTreeSet::new(),
            policy: PolicyState::default(),
            contract_read_through: 0,
            skipped: Vec::new(),
        }
    }
}

/// What `history_status` takes from the journal's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StatusFlags {
    /// The owner enabled capture.
    pub enabled: bool,
    /// Capture is paused.
    pub paused: bool,
    /// Query-visible retention, in days.
    pub retention_days: u32,
    /// Encrypted store quota, in bytes.
    pub quota_bytes: u64,
    /// Events dropped over the store's life.
    pub dropped_events: u64,
}

/// What `history_status` reads from the journal's state at one moment: its flags and its
/// health, folded where the state lives so that nobody copies the state (and its growing
/// signal list) to read them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StatusReading {
    /// The flags.
    pub flags: StatusFlags,
    /// The health category ([`State::health`]).
    pub health: HealthCategory,
}

impl State {
    /// Folds one event in. Never fails (see the module docs for the edge cases).
    pub fn apply(&mut self, event: &JournalEvent) {
        if event.check_bounds().is_err() {
            return;
        }
        match event {
            JournalEvent::ControlApplied { operation, .. } => match operation {
                ControlOperation::Enable => self.enabled = true,
                ControlOperation::Disable | ControlOperation::Delete => {
                    self.enabled = false;
                    self.paused = false;
                }
                ControlOperation::Pause => {
                    if self.enabled {
                        self.paused = true;
                    }
                }
                ControlOperation::Resume => self.paused = false,
                ControlOperation::Flush => {}
            },
            JournalEvent::RetentionSet { days, .. } => self.retention_days = *days,
            JournalEvent::QuotaSet {
                bytes, on_quota, ..
            } => {
                self.quota_bytes = *bytes;
                self.on_quota = *on_quota;
            }
            JournalEvent::KeyEpochStarted { epoch, reference } => {
                if self.key_epoch.as_ref().is_none_or(|k| *epoch > k.epoch) {
                    self.key_epoch = Some(KeyEpoch {
                        epoch: *epoch,
                        reference: reference.clone(),
                    });
                }
            }
            JournalEvent::SupervisorSignalled(signal) => {
                self.health_fold.apply(signal);
                self.restarts.note(signal);
            }
            JournalEvent::DropsRecorded { count } => {
                self.dropped_total = self.dropped_total.saturating_add(*count);
            }
            JournalEvent::SequenceMarked {
                high_water,
                boot,
                in_flight_max,
            } => {
                if self.history_high_water.is_none_or(|h| *high_water >= h) {
                    if self.history_high_water != Some(*high_water) {
                        self.history_mark_from = self.history_high_water.unwrap_or(0);
                    }
                    self.history_high_water = Some(*high_water);
                    self.history_mark_boot = *boot;
                    self.history_mark_in_flight_max = *in_flight_max;
                }
            }
            JournalEvent::RecordsLost {
                first_sequence,
                last_sequence,
            } => self.note_lost(*first_sequence..=*last_sequence),
            JournalEvent::TornTailRecorded { chunk, .. } => {
                if !self.torn_tails.contains(chunk) {
                    self.torn_tails.push(*chunk);
                }
            }
            JournalEvent::Policy(event) => self.policy.apply(event),
            JournalEvent::ChunkQuarantined { chunk, .. } => {
                if !self.quarantined.contains(chunk) {
                    self.quarantined.push(*chunk);
                }
            }
            JournalEvent::ChunkPruned { chunk, .. } => {
                self.pruned.insert(*chunk);
            }
            JournalEvent::ContractObserved {
                operation,
                source,
                sequence,
            } => {
                if *source == ContractSource::ControlEvent {
                    self.contract_read_through = self.contract_read_through.max(*sequence);
                }
                if narrows(self, *operation) {
                    self.apply_narrowing(*operation);
                }
            }
            JournalEvent::SequenceReleased {
                reserved,
                high_water,
            } => {
                if self.history_high_water == Some(*reserved) {
                    self.history_high_water = Some(*high_water);
                    self.history_mark_boot = None;
                    self.history_mark_in_flight_max = None;
                }
            }
            JournalEvent::SequencesSkipped {
                first_sequence,
                last_sequence,
            } => merge_range(&mut self.skipped, *first_sequence..=*last_sequence),
        }
    }

    /// What a narrowing observed in the contract does: `disable` and `delete` disable (and
    /// clear a pause), `pause` pauses.
    fn apply_narrowing(&mut self, operation: ControlOperation) {
        match operation {
            ControlOperation::Disable | ControlOperation::Delete => {
                self.enabled = false;
                self.paused = false;
            }
            ControlOperation::Pause => self.paused = true,
            _ => {}
        }
    }

    /// Adds `range` to [`State::lost`], merged with a range it overlaps or touches (a lost
    /// range is recorded again when the journal retries what a failed sync of its own lost).
    fn note_lost(&mut self, range: std::ops::RangeInclusive<u64>) {
        merge_range(&mut self.lost, range);
    }

    /// The highest sequence at or below `through` recorded lost or skipped (0: none).
    pub fn accounted_through(&self, through: u64) -> u64 {
        self.lost
            .iter()
            .chain(&self.skipped)
            .map(|range| *range.end())
            .filter(|&end| end <= through)
            .max()
            .unwrap_or(0)
    }

    /// Whether every sequence of `range` is recorded skipped or lost already.
    pub fn accounts_for(&self, range: &std::ops::RangeInclusive<u64>) -> bool {
        let covered = |ranges: &[std::ops::RangeInclusive<u64>], at: u64| {
            ranges
                .iter()
                .find(|kept| kept.contains(&at))
                .map(|kept| *kept.end())
        };
        let mut at = *range.start();
        while at <= *range.end() {
            match covered(&self.skipped, at).or_else(|| covered(&self.lost, at)) {
                Some(end) if end >= *range.end() => return true,
                Some(end) => at = end + 1,
                None => return false,
            }
        }
        true
    }

    /// Drops in the lifetime total that no history marker reports yet (signalled observed, not
    /// yet marked): the next writer writes their marker ([`crate::health::HealthFold::unmarked_drops`]).
    pub fn unmarked_drops(&self) -> u64 {
        self.health_fold.unmarked_drops()
    }

    /// Whether `sequence` was reported lost ([`State::lost`]).
    pub fn is_lost(&self, sequence: u64) -> bool {
        self.lost.iter().any(|range| range.contains(&sequence))
    }

    /// The state after `events`, from the defaults.
    pub fn replay<'a>(events: impl IntoIterator<Item = &'a JournalEvent>) -> State {
        let mut state = State::default();
        for event in events {
            state.apply(event);
        }
        state
    }

    /// What `history_status` needs from this state.
    pub fn status_flags(&self) -> StatusFlags {
        StatusFlags {
            enabled: self.enabled,
            paused: self.paused,
            retention_days: self.retention_days,
            quota_bytes: self.quota_bytes,
            dropped_events: self.dropped_total,
        }
    }

    /// The flags and the health of this state, with the facts it does not hold (see
    /// [`State::health`]).
    pub fn status_reading(&self, admitted: bool, pending_drops: u64) -> StatusReading {
        StatusReading {
            flags: self.status_flags(),
            health: self.health(admitted, pending_drops),
        }
    }

    /// The health inputs of this state, with the facts it does not hold: whether the daemon
    /// admits the feature and how many drops are still in the capture counter.
    pub fn health_inputs(&self, admitted: bool, pending_drops: u64) -> HealthInputs {
        HealthInputs {
            admitted,
            enabled: self.enabled,
            paused: self.paused,
            pending_drops,
        }
    }

    /// The health category of this state (a fold over its signals).
    pub fn health(&self, admitted: bool, pending_drops: u64) -> HealthCategory {
        self.health_fold
            .category(&self.health_inputs(admitted, pending_drops))
    }

    /// Whether `category` holds after this state's signals, whatever outranks it in
    /// [`State::health`] (a writer asks whether a rollback is still shown).
    pub fn holds(&self, category: HealthCategory, admitted: bool, pending_drops: u64) -> bool {
        self.health_fold
            .holds(category, &self.health_inputs(admitted, pending_drops))
    }

    /// `child`'s restart history, for [`crate::supervision::decide`].
    pub fn restart_history(&self, child: Child) -> Vec<u64> {
        self.restarts.of(child).to_vec()
    }
}

/// Adds `range` to `ranges` (in order, disjoint), merged with a range it overlaps or touches.
fn merge_range(
    ranges: &mut Vec<std::ops::RangeInclusive<u64>>,
    range: std::ops::RangeInclusive<u64>,
) {
    if range.is_empty() {
        return;
    }
    let (mut start, mut end) = range.into_inner();
    ranges.retain(|kept| {
        let apart = *kept.end() < start.saturating_sub(1) || *kept.start() > end.saturating_add(1);
        if !apart {
            start = start.min(*kept.start());
            end = end.max(*kept.end());
        }
        apart
    });
    let at = ranges.partition_point(|kept| *kept.start() < start);
    ranges.insert(at, start..=end);
}

/// Whether the contract saying `operation` is narrower than `state`: a disable (or delete)
/// of an enabled store, a pause of an enabled, running one. Nothing else narrows.
fn narrows(state: &State, operation: ControlOperation) -> bool {
    match operation {
        ControlOperation::Disable | ControlOperation::Delete => state.enabled,
        ControlOperation::Pause => state.enabled && !state.paused,
        _ => false,
    }
}

/// What someone asks the engine to do.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Command {
    /// Start capturing.
    Enable,
    /// Stop capturing (also clears a pause).
    Disable,
    /// Pause capture (only while enabled).
    Pause,
    /// Resume a paused capture (only while enabled).
    Resume,
    /// Make buffered events durable.
    Flush,
    /// Set query-visible retention.
    SetRetention {
        /// In days.
        days: u32,
    },
    /// Set the quota and what happens at it.
    SetQuota {
        /// In bytes.
        bytes: u64,
        /// What capture does at the quota.
        on_quota: OnQuota,
    },
    /// Record that the capture path dropped `count` events.
    RecordDrops {
        /// How many.
        count: u64,
    },
    /// Reserve the history stream's sequences through `high_water`.
    MarkSequence {
        /// The highest sequence reserved.
        high_water: u64,
        /// The boot the reservation is made in (`None`: unknown).
        boot: Option<BootId>,
        /// The reserving writer's in-flight bound.
        in_flight_max: Option<u64>,
    },
    /// Record that a key epoch began.
    StartKeyEpoch {
        /// The epoch.
        epoch: NonZeroU64,
        /// Its root key's reference.
        reference: KeyReference,
    },
    /// Record a supervision or store signal.
    RecordSignal(Signal),
    /// Record what the contract's state said at open (`docs/design.md`, "One truth about on
    /// and off"): taken when it narrows, and a control event is never read twice.
    ObserveContract {
        /// What it said.
        operation: ControlOperation,
        /// Where.
        source: ContractSource,
        /// The control event's sequence; 0 for the state file.
        sequence: u64,
    },
    /// A clean stop: only sequences through `high_water` were handed out; the rest of the
    /// reservation is released.
    ReleaseSequences {
        /// The highest sequence handed out.
        high_water: u64,
    },
    /// An open after a writer that did not stop cleanly, in `boot`: if the reservation was
    /// made in this boot, the page cache survived the crash, so every record the crashed
    /// writer wrote is in the store's files (which the caller has made durable); `on_disk` is
    /// the highest sequence they hold. The reservation is released down to it (or to the
    /// highest sequence recorded lost or skipped, if higher): nothing above was ever seen.
    RecoverSequences {
        /// The boot the opening writer runs in.
        boot: BootId,
        /// The highest sequence the store's files hold.
        on_disk: u64,
    },
    /// An open after a writer that did not stop cleanly, when the reservation cannot be
    /// released ([`Command::RecoverSequences`] gave nothing: another boot, or none known), the
    /// store's files holding `on_disk` at most: if the reserving writer journaled its in-flight
    /// bound, it never handed out more than that past what was certainly durable (its last
    /// sync, its floor at open, or a range recorded lost), so only the sequences above what is
    /// on disk up to that bound are skipped, and the rest of the reservation is released.
    SkipAfterCrash {
        /// The highest sequence the store's files hold.
        on_disk: u64,
    },
    /// Record sequences skipped at an open after a writer that did not stop cleanly.
    RecordSkip {
        /// The first skipped.
        first_sequence: u64,
        /// The last skipped.
        last_sequence: u64,
    },
}

/// Why a command was refused. Carries only fixed values, never free-form content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    /// This caller may not ask for this command.
    #[error("this caller may not do that")]
    CallerNotPermitted {
        /// Who asked.
        caller: CallerKind,
    },
    /// Pause or resume while capture is disabled.
    #[error("capture is not enabled")]
    NotEnabled,
    /// The retention is outside its bounds.
    #[error("retention must be {min_days}..={max_days} days")]
    RetentionOutOfRange {
        /// The fewest days allowed.
        min_days: u32,
        /// The most days allowed.
        max_days: u32,
    },
    /// The quota is below its minimum.
    #[error("the quota must be at least {min_bytes} bytes")]
    QuotaBelowMinimum {
        /// The smallest quota allowed, in bytes.
        min_bytes: u64,
    },
    /// The quota is above its maximum.
    #[error("the quota must be at most {max_bytes} bytes")]
    QuotaAboveMaximum {
        /// The largest quota allowed, in bytes.
        max_bytes: u64,
    },
    /// A high-water mark of 0 (sequences start at 1).
    #[error("a high-water mark must be at least 1")]
    HighWaterZero,
    /// The mark would go backwards.
    #[error("the high-water mark never decreases (it is {current})")]
    HighWaterWouldDecrease {
        /// The current mark.
        current: u64,
    },
    /// The epoch is not above the current one (or names another key at the same epoch).
    #[error("a new key epoch must be above the current one ({current})")]
    KeyEpochNotIncreasing {
        /// The current epoch.
        current: NonZeroU64,
    },
    /// The signal is outside its bounds (a time beyond annal's range, a zero drop count).
    #[error("the signal is outside its bounds")]
    SignalOutOfBounds,
    /// A contract observation is outside its bounds (`flush`, a widening from the state file,
    /// a sequence that does not fit its source).
    #[error("the observation is outside its bounds")]
    ObservationOutOfBounds,
    /// A skipped range is empty or starts at 0.
    #[error("a skipped range must be non-empty and start at 1 or above")]
    SkipOutOfBounds,
}

/// Who may ask for what.
fn permitted(command: &Command, caller: CallerKind) -> bool {
    match command {
        Command::Enable
        | Command::Disable
        | Command::Pause
        | Command::Resume
        | Command::SetRetention { .. }
        | Command::SetQuota { .. } => {
            matches!(caller, CallerKind::OwnerCli | CallerKind::Embedder)
        }
        Command::Flush => matches!(
            caller,
            CallerKind::OwnerCli | CallerKind::Embedder | CallerKind::Daemon
        ),
        Command::RecordDrops { .. }
        | Command::MarkSequence { .. }
        | Command::StartKeyEpoch { .. }
        | Command::RecordSignal(_)
        | Command::ObserveContract { .. }
        | Command::ReleaseSequences { .. }
        | Command::RecoverSequences { .. }
        | Command::SkipAfterCrash { .. }
        | Command::RecordSkip { .. } => caller == CallerKind::Daemon,
    }
}

/// The events `command` from `caller` appends to a journal whose state is `state`, or why it is
/// refused (the table in the module docs). Pure: the same inputs always give the same answer.
pub fn decide(
    state: &State,
    command: Command,
    caller: CallerKind,
) -> Result<Vec<JournalEvent>, CommandError> {
    if !permitted(&command, caller) {
        return Err(CommandError::CallerNotPermitted { caller });
    }
    let control = |operation| Ok(vec![JournalEvent::ControlApplied { operation, caller }]);
    match command {
        Command::Enable if state.enabled => Ok(Vec::new()),
        Command::Enable => control(ControlOperation::Enable),
        Command::Disable if !state.enabled => Ok(Vec::new()),
        Command::Disable => control(ControlOperation::Disable),
        Command::Pause | Command::Resume if !state.enabled => Err(CommandError::NotEnabled),
        Command::Pause if state.paused => Ok(Vec::new()),
        Command::Pause => control(ControlOperation::Pause),
        Command::Resume if !state.paused => Ok(Vec::new()),
        Command::Resume => control(ControlOperation::Resume),
        Command::Flush => control(ControlOperation::Flush),
        Command::SetRetention { days } => {
            if !retention_in_bounds(days) {
                Err(CommandError::RetentionOutOfRange {
                    min_days: RETENTION_MIN_DAYS,
                    max_days: RETENTION_MAX_DAYS,
                })
            } else if days == state.retention_days {
                Ok(Vec::new())
            } else {
                Ok(vec![JournalEvent::RetentionSet { days, caller }])
            }
        }
        Command::SetQuota { bytes, on_quota } => {
            if bytes < QUOTA_MIN_BYTES {
                Err(CommandError::QuotaBelowMinimum {
                    min_bytes: QUOTA_MIN_BYTES,
                })
            } else if !quota_in_bounds(bytes) {
                Err(CommandError::QuotaAboveMaximum {
                    max_bytes: QUOTA_MAX_BYTES,
                })
            } else if bytes == state.quota_bytes && on_quota == state.on_quota {
                Ok(Vec::new())
            } else {
                Ok(vec![JournalEvent::QuotaSet {
                    bytes,
                    on_quota,
                    caller,
                }])
            }
        }
        Command::RecordDrops { count: 0 } => Ok(Vec::new()),
        Command::RecordDrops { count } => Ok(vec![JournalEvent::DropsRecorded { count }]),
        Command::MarkSequence { high_water: 0, .. } => Err(CommandError::HighWaterZero),
        Command::MarkSequence {
            high_water,
            boot,
            in_flight_max,
        } => match state.history_high_water {
            Some(current) if high_water < current => {
                Err(CommandError::HighWaterWouldDecrease { current })
            }
            Some(current) if high_water == current => Ok(Vec::new()),
            _ => Ok(vec![JournalEvent::SequenceMarked {
                high_water,
                boot,
                in_flight_max,
            }]),
        },
        Command::StartKeyEpoch { epoch, reference } => match &state.key_epoch {
            Some(current) if current.epoch == epoch && current.reference == reference => {
                Ok(Vec::new())
            }
            Some(current) if epoch <= current.epoch => Err(CommandError::KeyEpochNotIncreasing {
                current: current.epoch,
            }),
            _ => Ok(vec![JournalEvent::KeyEpochStarted { epoch, reference }]),
        },
        Command::RecordSignal(signal) => {
            check_signal(&signal).map_err(|_| CommandError::SignalOutOfBounds)?;
            Ok(vec![JournalEvent::SupervisorSignalled(signal)])
        }
        Command::ObserveContract {
            operation,
            source,
            sequence,
        } => {
            let event = JournalEvent::ContractObserved {
                operation,
                source,
                sequence,
            };
            event
                .check_bounds()
                .map_err(|_| CommandError::ObservationOutOfBounds)?;
            // A control event at or below the one read last was taken into account then (a
            // crash's unsealed chunk is read at every open): it never narrows again.
            let (unread, from_event) = match source {
                ContractSource::ControlEvent => (sequence > state.contract_read_through, true),
                _ => (true, false),
            };
            if unread && (from_event || narrows(state, operation)) {
                Ok(vec![event])
            } else {
                Ok(Vec::new())
            }
        }
        Command::ReleaseSequences { high_water } => match state.history_high_water {
            Some(reserved) if high_water >= 1 && high_water < reserved => {
                Ok(vec![JournalEvent::SequenceReleased {
                    reserved,
                    high_water,
                }])
            }
            _ => Ok(Vec::new()),
        },
        Command::RecoverSequences { boot, on_disk } => {
            let (Some(reserved), Some(reserved_in)) =
                (state.history_high_water, state.history_mark_boot)
            else {
                return Ok(Vec::new());
            };
            let high_water = on_disk.max(state.accounted_through(reserved));
            if reserved_in == boot && high_water >= 1 && high_water < reserved {
                Ok(vec![JournalEvent::SequenceReleased {
                    reserved,
                    high_water,
                }])
            } else {
                Ok(Vec::new())
            }
        }
        Command::SkipAfterCrash { on_disk } => {
            let (Some(reserved), Some(in_flight_max)) =
                (state.history_high_water, state.history_mark_in_flight_max)
            else {
                return Ok(Vec::new());
            };
            let durable = on_disk
                .max(state.history_mark_from)
                .max(state.accounted_through(reserved));
            let floor = durable.saturating_add(in_flight_max).min(reserved);
            if floor >= reserved || on_disk >= floor {
                return Ok(Vec::new());
            }
            let mut events = Vec::new();
            if !state.accounts_for(&(on_disk + 1..=floor)) {
                events.push(JournalEvent::SequencesSkipped {
                    first_sequence: on_disk + 1,
                    last_sequence: floor,
                });
            }
            events.push(JournalEvent::SequenceReleased {
                reserved,
                high_water: floor,
            });
            Ok(events)
        }
        Command::RecordSkip {
            first_sequence,
            last_sequence,
        } => {
            if first_sequence == 0 || first_sequence > last_sequence {
                Err(CommandError::SkipOutOfBounds)
            } else if state.accounts_for(&(first_sequence..=last_sequence)) {
                Ok(Vec::new())
            } else {
                Ok(vec![JournalEvent::SequencesSkipped {
                    first_sequence,
                    last_sequence,
                }])
            }
        }
    }
}
