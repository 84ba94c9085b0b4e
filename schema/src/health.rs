//! The 13 fixed health categories of seed 000.

use serde::{Deserialize, Serialize};

/// A fixed health category. The `health` field of `history_status` is always one of these, and
/// `health` events carry one. The set is closed: nothing free-form ever describes health.
///
/// Deliberately not ordered: declaration order is not a precedence between categories.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HealthCategory {
    /// Capture and reads work.
    Ready,
    /// The owner has not enabled capture (or disabled it).
    Disabled,
    /// The owner paused capture.
    Paused,
    /// The daemon does not admit the history feature.
    NotAdmitted,
    /// The namespace key cannot be loaded (no store, no entry, store unreachable).
    KeyUnavailable,
    /// The credential store is locked.
    KeyLocked,
    /// The key reference or key material is invalid.
    KeyCorrupt,
    /// Destroying the namespace key could not be verified.
    KeyDestroyFailed,
    /// The encrypted store cannot be read or written.
    StorageUnavailable,
    /// Framing, schema, sequence or authentication validation failed.
    StorageCorrupt,
    /// Capture reached the encrypted-byte quota.
    QuotaReached,
    /// The non-blocking capture path dropped events.
    EventsDropped,
    /// The writer is not running.
    WriterStopped,
}

impl HealthCategory {
    /// Every category, in the order seed 000 lists them.
    pub const ALL: [HealthCategory; 13] = [
        Self::Ready,
        Self::Disabled,
        Self::Paused,
        Self::NotAdmitted,
        Self::KeyUnavailable,
        Self::KeyLocked,
        Self::KeyCorrupt,
        Self::KeyDestroyFailed,
        Self::StorageUnavailable,
        Self::StorageCorrupt,
        Self::QuotaReached,
        Self::EventsDropped,
        Self::WriterStopped,
    ];

    /// The exact wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::Disabled => "disabled",
            Self::Paused => "paused",
            Self::NotAdmitted => "not_admitted",
            Self::KeyUnavailable => "key_unavailable",
            Self::KeyLocked => "key_locked",
            Self::KeyCorrupt => "key_corrupt",
            Self::KeyDestroyFailed => "key_destroy_failed",
            Self::StorageUnavailable => "storage_unavailable",
            Self::StorageCorrupt => "storage_corrupt",
            Self::QuotaReached => "quota_reached",
            Self::EventsDropped => "events_dropped",
            Self::WriterStopped => "writer_stopped",
        }
    }
}

impl std::fmt::Display for HealthCategory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
