//! The fixed structured error codes of the history tools.

use serde::{Deserialize, Serialize};

use crate::HealthCategory;

/// A structured error code returned by `history_status` / `history_query` (and `unknown_tool`
/// for a call naming neither). Clients branch on these; human-readable text may change, these
/// may not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The input does not match the tool's closed schema.
    InvalidHistoryQuery,
    /// `since_sequence` exceeds `until_sequence`.
    InvalidHistoryQueryRange,
    /// Admission changed after tool discovery.
    HistoryPreviewNotAdmitted,
    /// The platform key cannot be loaded.
    HistoryKeyUnavailable,
    /// The credential store is locked.
    HistoryKeyLocked,
    /// The key reference or material is invalid.
    HistoryKeyCorrupt,
    /// The encrypted store cannot be read.
    HistoryStorageUnavailable,
    /// Framing, schema, sequence or authentication validation failed.
    HistoryStorageCorrupt,
    /// Capture reached its encrypted-byte quota.
    HistoryQuotaReached,
    /// The non-blocking writer dropped events.
    HistoryEventsDropped,
    /// The writer is unavailable.
    HistoryWriterStopped,
    /// The call names a tool that does not exist (neither history tool).
    UnknownTool,
}

impl ErrorCode {
    /// Every code.
    pub const ALL: [ErrorCode; 12] = [
        Self::InvalidHistoryQuery,
        Self::InvalidHistoryQueryRange,
        Self::HistoryPreviewNotAdmitted,
        Self::HistoryKeyUnavailable,
        Self::HistoryKeyLocked,
        Self::HistoryKeyCorrupt,
        Self::HistoryStorageUnavailable,
        Self::HistoryStorageCorrupt,
        Self::HistoryQuotaReached,
        Self::HistoryEventsDropped,
        Self::HistoryWriterStopped,
        Self::UnknownTool,
    ];

    /// The exact wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::InvalidHistoryQuery => "invalid_history_query",
            Self::InvalidHistoryQueryRange => "invalid_history_query_range",
            Self::HistoryPreviewNotAdmitted => "history_preview_not_admitted",
            Self::HistoryKeyUnavailable => "history_key_unavailable",
            Self::HistoryKeyLocked => "history_key_locked",
            Self::HistoryKeyCorrupt => "history_key_corrupt",
            Self::HistoryStorageUnavailable => "history_storage_unavailable",
            Self::HistoryStorageCorrupt => "history_storage_corrupt",
            Self::HistoryQuotaReached => "history_quota_reached",
            Self::HistoryEventsDropped => "history_events_dropped",
            Self::HistoryWriterStopped => "history_writer_stopped",
            Self::UnknownTool => "unknown_tool",
        }
    }

    /// A short fixed sentence for a person or a model reading the error (clients branch on the
    /// code; this text may change). It never holds a value the caller chose.
    pub const fn message(self) -> &'static str {
        match self {
            Self::InvalidHistoryQuery => "the arguments do not match the tool's input schema",
            Self::InvalidHistoryQueryRange => "since_sequence is greater than until_sequence",
            Self::HistoryPreviewNotAdmitted => "history is not admitted on this machine",
            Self::HistoryKeyUnavailable => "the history key cannot be loaded",
            Self::HistoryKeyLocked => "the credential store holding the history key is locked",
            Self::HistoryKeyCorrupt => "the history key is invalid",
            Self::HistoryStorageUnavailable => "the history store cannot be read right now",
            Self::HistoryStorageCorrupt => "the history store failed validation",
            Self::HistoryQuotaReached => "history reached its storage quota",
            Self::HistoryEventsDropped => "history dropped events",
            Self::HistoryWriterStopped => "the history writer is stopped",
            Self::UnknownTool => {
                "no such tool: the history tools are history_status and history_query"
            }
        }
    }

    /// The error code a tool returns when the store is in a failing health category, or `None`
    /// when that category does not fail a read (ready, disabled, paused, and the capture-side
    /// categories, which leave reads working).
    pub const fn for_failing_health(category: HealthCategory) -> Option<ErrorCode> {
        match category {
            HealthCategory::NotAdmitted => Some(Self::HistoryPreviewNotAdmitted),
            HealthCategory::KeyUnavailable | HealthCategory::KeyDestroyFailed => {
                Some(Self::HistoryKeyUnavailable)
            }
            HealthCategory::KeyLocked => Some(Self::HistoryKeyLocked),
            HealthCategory::KeyCorrupt => Some(Self::HistoryKeyCorrupt),
            HealthCategory::StorageUnavailable => Some(Self::HistoryStorageUnavailable),
            HealthCategory::StorageCorrupt => Some(Self::HistoryStorageCorrupt),
            HealthCategory::Ready
            | HealthCategory::Disabled
            | HealthCategory::Paused
            | HealthCategory::QuotaReached
            | HealthCategory::EventsDropped
            | HealthCategory::WriterStopped => None,
        }
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
