//! On and off, and the sequences a writer leaves behind: the owner's control operations, one
//! truth about on and off at open (`docs/design.md`, "One truth about on and off"), the skip a
//! crashed predecessor left and the reservation a clean stop releases (`docs/design.md`, "No
//! gap without a cause").
//!
//! At open the contract's two places are read: `state.json` and the newest lifecycle `control`
//! event of the history stream not read before. A disable or pause another implementation
//! wrote wins and is journaled with its source (`contract_observed`); a widening is never
//! taken. annal's answer is then written back to whichever place says otherwise: the state
//! file, and a `control` event when the stream's last word disagrees.

use annal_schema::ControlOperation;

use super::{Effect, State};
use crate::journal::{CallerKind, Command, CommandError, ContractSource, JournalEvent, decide};
use crate::store::{ControlRead, StateMirror};

/// The journal command of an owner's control operation (`None`: not one the writer carries
/// out, such as `delete`).
pub fn control_command(operation: ControlOperation) -> Option<Command> {
    match operation {
        ControlOperation::Enable => Some(Command::Enable),
        ControlOperation::Disable => Some(Command::Disable),
        ControlOperation::Pause => Some(Command::Pause),
        ControlOperation::Resume => Some(Command::Resume),
        ControlOperation::Flush => Some(Command::Flush),
        _ => None,
    }
}

/// Whether `operation` narrows capture (`disable`, `pause`). The contract's two places are
/// written in the order that leaves the narrower answer after a crash between them: a
/// narrowing writes `state.json` first, a widening its `control` event first.
pub fn narrows(operation: ControlOperation) -> bool {
    matches!(
        operation,
        ControlOperation::Disable | ControlOperation::Pause
    )
}

/// The narrowing a contract state says against an enabled, running store: `disable` when it
/// is disabled, `pause` when it is paused, nothing when it is running.
pub fn narrowing_of(state: StateMirror) -> Option<ControlOperation> {
    if !state.enabled {
        Some(ControlOperation::Disable)
    } else if state.paused {
        Some(ControlOperation::Pause)
    } else {
        None
    }
}

/// The state a lifecycle `control` event leaves.
pub fn implied_by(operation: ControlOperation) -> StateMirror {
    match operation {
        ControlOperation::Disable | ControlOperation::Delete => StateMirror {
            enabled: false,
            paused: false,
        },
        ControlOperation::Pause => StateMirror {
            enabled: true,
            paused: true,
        },
        _ => StateMirror {
            enabled: true,
            paused: false,
        },
    }
}

/// An owner's control operation, decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlPlan {
    /// Journal these, durably (none: the operation is in effect already).
    pub events: Vec<JournalEvent>,
    /// Whether it narrows capture ([`narrows`]).
    pub narrowing: bool,
    /// Whether the history gets the contract's `control` event: when the operation changed
    /// something, and for every flush while history is enabled.
    pub writes_control_event: bool,
}

/// What the contract said at open, journaled (the caller makes the events durable) and
/// applied already.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// The `contract_observed` events to journal, durably, before capture opens.
    pub events: Vec<JournalEvent>,
    /// The newest lifecycle `control` event not read before.
    unread: Option<ControlRead>,
    /// The state file as read.
    file: Option<StateMirror>,
    /// enabled and paused before the observations.
    before: StateMirror,
}

/// annal's answer to the contract, to write back where it differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContractAnswer {
    /// Write the state file (it says otherwise, or there is none).
    pub write_state_file: bool,
    /// Append this `control` event to the history (and sync): the stream's last word
    /// disagrees with the answer.
    pub control_event: Option<ControlOperation>,
}

impl State {
    /// enabled and paused as the projection has them, in the state file's form.
    pub fn state_mirror(&self) -> StateMirror {
        StateMirror {
            enabled: self.projection.enabled,
            paused: self.projection.paused,
        }
    }

    /// Decides `operation` for `caller` (one [`control_command`] maps). A writer that is not
    /// open refuses: a store that was never enabled has nothing to pause or flush.
    pub fn decide_control(
        &self,
        operation: ControlOperation,
        caller: CallerKind,
    ) -> Result<ControlPlan, CommandError> {
        let command = match (self.open, control_command(operation)) {
            (true, Some(command)) => command,
            _ => return Err(CommandError::NotEnabled),
        };
        let events = decide(&self.projection, command, caller)?;
        Ok(ControlPlan {
            // A flush is the contract's acknowledged operation: its event is written each time,
            // as the reference writes it, but never into a history that is disabled (the
            // journal records it either way).
            writes_control_event: match operation {
                ControlOperation::Flush => self.projection.enabled,
                _ => !events.is_empty(),
            },
            narrowing: narrows(operation),
            events,
        })
    }

    /// Reads the contract at open: `newest` (the newest lifecycle `control` event this open
    /// read) when the journal has not read it before, and the state `file` when it narrows.
    /// Each is observed as the journal's rules decide (a narrowing wins, a widening is never
    /// taken), applied now: the narrowing stays in effect even if the journal's commit fails.
    pub fn observe_contract(
        &mut self,
        newest: Option<ControlRead>,
        file: Option<StateMirror>,
    ) -> Observed {
        let unread = newest.filter(|read| read.sequence > self.projection.contract_read_through);
        let mut observations = Vec::new();
        if let Some(read) = unread {
            observations.push(Command::ObserveContract {
                operation: read.operation,
                source: ContractSource::ControlEvent,
                sequence: read.sequence,
            });
        }
        if let Some(operation) = file.and_then(narrowing_of) {
            observations.push(Command::ObserveContract {
                operation,
                source: ContractSource::StateFile,
                sequence: 0,
            });
        }
        let before = self.state_mirror();
        let mut events = Vec::new();
        for command in observations {
            if let Ok(decided) = decide(&self.projection, command, CallerKind::Daemon) {
                for event in &decided {
                    self.projection.apply(event);
                }
                events.extend(decided);
            }
        }
        Observed {
            events,
            unread,
            file,
            before,
        }
    }

    /// annal's answer once the observations are journaled: the state file is written when it
    /// differs, and the stream gets a `control` event when its newest one says otherwise or,
    /// when none was read, when the state file narrowed annal (the stream's last word is then
    /// annal's own, wider one). Only a narrowing is ever written to the stream.
    pub fn contract_answer(&self, observed: &Observed) -> ContractAnswer {
        let answer = self.state_mirror();
        let stream_disagrees = match observed.unread {
            Some(read) => implied_by(read.operation) != answer,
            None => answer != observed.before,
        };
        ContractAnswer {
            write_state_file: observed.file != Some(answer),
            control_event: narrowing_of(answer).filter(|_| stream_disagrees),
        }
    }

    /// The sequences a writer that did not stop cleanly skipped: above what the store holds
    /// (`stored_high_water`) and through the journal's mark (`journal_floor`). Recorded once
    /// (journaled with the next tick, applied now), so a reader tells this gap from drops.
    pub fn record_skip(
        &mut self,
        journal_floor: Option<u64>,
        stored_high_water: Option<u64>,
    ) -> Option<Effect> {
        let stored = stored_high_water.unwrap_or(0);
        let floor = journal_floor.filter(|&floor| floor > stored)?;
        let command = Command::RecordSkip {
            first_sequence: stored + 1,
            last_sequence: floor,
        };
        let events = decide(&self.projection, command, CallerKind::Daemon).ok()?;
        if events.is_empty() {
            return None;
        }
        for event in &events {
            self.projection.apply(event);
        }
        Some(Effect::Record(events))
    }

    /// An open after a writer that did not stop cleanly (the journal's mark is above
    /// `stored_high_water`, the highest sequence the store's files hold): if the mark's
    /// reservation was made in this writer's boot, the journal events (to make durable) that
    /// release it down to what is on disk, or recorded lost or skipped
    /// ([`Command::RecoverSequences`]). The page cache survived the crash, so nothing above
    /// that was ever seen by a reader: the next record follows the last one, no gap. The
    /// caller makes the files it read durable first, then the events, and only then lowers its
    /// floor. Empty after another boot, with no boot known, or with nothing to release: the
    /// skip is recorded instead ([`State::record_skip`]).
    pub fn recover_sequences(&self, stored_high_water: Option<u64>) -> Vec<JournalEvent> {
        let Some(boot) = self.boot else {
            return Vec::new();
        };
        decide(
            &self.projection,
            Command::RecoverSequences {
                boot,
                on_disk: stored_high_water.unwrap_or(0),
            },
            CallerKind::Daemon,
        )
        .unwrap_or_default()
    }

    /// An open after a writer that did not stop cleanly, when [`State::recover_sequences`]
    /// released nothing (another boot, or none known): the journal events (to make durable)
    /// that skip only what the crashed writer may have had in flight above what is certainly
    /// durable, and release the rest of its reservation
    /// ([`Command::SkipAfterCrash`]). Empty when its writer journaled no in-flight bound, or
    /// nothing would be released: then [`State::record_skip`] skips through the mark.
    pub fn skip_after_crash(&self, stored_high_water: Option<u64>) -> Vec<JournalEvent> {
        decide(
            &self.projection,
            Command::SkipAfterCrash {
                on_disk: stored_high_water.unwrap_or(0),
            },
            CallerKind::Daemon,
        )
        .unwrap_or_default()
    }

    /// A clean stop: the journal events (to make durable) that bring the journal's mark down
    /// from the reservation to `high_water`, the last sequence this writer handed out, so the
    /// next writer goes on at the one after it (no gap). Nothing above it was ever handed
    /// out, so no sequence can be reused. Empty when there is nothing to release.
    pub fn release_sequences(&self, high_water: u64) -> Vec<JournalEvent> {
        decide(
            &self.projection,
            Command::ReleaseSequences { high_water },
            CallerKind::Daemon,
        )
        .unwrap_or_default()
    }
}
