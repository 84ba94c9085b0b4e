//! What a chunk's records hold: the codec is generic over a [`RecordSchema`], so the history
//! stream (v0 events) and annal's engine journal (its own closed schema) share one framing,
//! one reader and one set of verdicts instead of two copies.

use std::time::Duration;

use super::plaintext::{PlaintextFault, validate_plaintext};

/// The plaintext schema of one stream's records.
pub trait RecordSchema: 'static {
    /// A record's plaintext, parsed.
    type Event: Clone + std::fmt::Debug + PartialEq + Eq + Send + Sync + 'static;

    /// Validates a decrypted plaintext against the schema (the reader's check: what the
    /// contract accepts).
    fn parse(plaintext: &[u8]) -> Result<Self::Event, PlaintextFault>;

    /// The record's sequence in its stream (>= 1, strictly increasing within a chunk).
    fn sequence(event: &Self::Event) -> u64;

    /// When the record's event happened, as time since the Unix epoch (retention and seals use
    /// it).
    fn time_since_epoch(event: &Self::Event) -> Duration;

    /// What makes a record the same record across chunks besides its sequence, when the schema
    /// has such a thing (a v0 event's `(source, id)`): the merge treats a second record with
    /// the same identity as a duplicate or a conflict.
    fn identity(event: &Self::Event) -> Option<(&str, &str)> {
        let _ = event;
        None
    }

    /// Whether a record parsed from a chunk belongs to that chunk's stream (`stream_id` is the
    /// header's): a v0 event's `source` must name it. A record that does not is
    /// [`CorruptReason::SourceMismatch`](super::CorruptReason::SourceMismatch). Schemas without
    /// such a field accept every record.
    fn belongs_to_stream(event: &Self::Event, stream_id: &str) -> bool {
        let _ = (event, stream_id);
        true
    }
}

/// The v0 history events of the contract (`annal_schema::Event`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HistorySchema;

impl RecordSchema for HistorySchema {
    type Event = annal_schema::Event;

    fn parse(plaintext: &[u8]) -> Result<Self::Event, PlaintextFault> {
        validate_plaintext(plaintext)
    }

    fn sequence(event: &Self::Event) -> u64 {
        event.data.sequence.get()
    }

    fn time_since_epoch(event: &Self::Event) -> Duration {
        event.time.since_epoch()
    }

    fn identity(event: &Self::Event) -> Option<(&str, &str)> {
        Some((event.source.as_str(), event.id.as_str()))
    }

    /// `source` is `urn:cua-driver:history:<stream_id>` (the reference and annal write it so in
    /// every chunk).
    fn belongs_to_stream(event: &Self::Event, stream_id: &str) -> bool {
        event.source.stream_id() == stream_id
    }
}
