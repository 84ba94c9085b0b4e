//! An owner's setting: the journal's rules decide it, and once the journal answers, the
//! chunk size follows the quota (`store::chunk_size_limit_for_quota`) and a shorter
//! retention or a smaller quota prunes at once. What a failed commit leaves in effect is the
//! journal's (`journal::Widenings`): a narrowing at once, a widening only once durable.

use super::State;
use crate::journal::{
    CallerKind, Command, CommandError, JournalEvent, OnQuota, decide, quota_in_bounds,
    retention_in_bounds,
};

/// An owner's setting, journaled and durable before it is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Setting {
    /// Query-visible retention, in days (`journal::RETENTION_MIN_DAYS..=RETENTION_MAX_DAYS`):
    /// no query returns an older event, and pruning removes the chunks holding only such
    /// events.
    Retention {
        /// In days.
        days: u32,
    },
    /// The encrypted-byte quota (`journal::QUOTA_MIN_BYTES..=QUOTA_MAX_BYTES`) and what capture
    /// does at it.
    Quota {
        /// In bytes.
        bytes: u64,
        /// Stop capture, or evict the oldest sealed chunks.
        on_quota: OnQuota,
    },
}

impl Setting {
    /// The journal command that sets it.
    pub fn command(self) -> Command {
        match self {
            Self::Retention { days } => Command::SetRetention { days },
            Self::Quota { bytes, on_quota } => Command::SetQuota { bytes, on_quota },
        }
    }

    /// Whether the value is within its bounds (`Engine::set` checks before anything is sent,
    /// and the journal's rules again).
    pub fn in_bounds(self) -> bool {
        match self {
            Self::Retention { days } => retention_in_bounds(days),
            Self::Quota { bytes, .. } => quota_in_bounds(bytes),
        }
    }
}

impl State {
    /// The journal events that set `setting` for `caller` (none: it is in effect already), or
    /// why the journal's rules refuse it. A writer that is not open refuses every setting.
    pub fn decide_setting(
        &self,
        setting: Setting,
        caller: CallerKind,
    ) -> Result<Vec<JournalEvent>, CommandError> {
        if !self.open {
            return Err(CommandError::NotEnabled);
        }
        decide(&self.projection, setting.command(), caller)
    }
}
