//! The rules of an import (`annal import`): finished events, read from an export archive,
//! written into a new store with their own ids, `source` and `data.sequence`
//! ([`StoreWriter::append_imported`](super::StoreWriter::append_imported)). Pure: checked
//! before anything is written or a sequence is used.
//!
//! - Each event keeps annal's write rules (an event that breaks them is never written, also
//!   when another implementation's store held it).
//! - Sequences strictly increase across the batch and start above the writer's high water:
//!   gaps are kept (they are the archive's), a sequence is never reused.
//! - One batch names one `source` (one stream): its chunks' headers carry that stream's id,
//!   which the reader checks each record against. The caller splits at a change of source.

use annal_schema::{Event, Sequence, WriteRuleViolation};

/// Why a batch of finished events is refused. Nothing was written, no sequence was used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImportViolation {
    /// Event `index` breaks annal's write rules.
    #[error("event {index} breaks the write rules: {violation}")]
    WriteRules {
        /// Index in the batch.
        index: usize,
        /// Which rule.
        violation: WriteRuleViolation,
    },
    /// Event `index`'s sequence is not above the one before it (or the writer's high water).
    #[error("event {index}: data.sequence {sequence} is not above {floor}")]
    NotAbove {
        /// Index in the batch.
        index: usize,
        /// Its sequence.
        sequence: u64,
        /// The sequence it must be above.
        floor: u64,
    },
    /// Event `index`'s `source` names no stream id a chunk header can carry.
    #[error("event {index}: its source names no stream id")]
    NoStream {
        /// Index in the batch.
        index: usize,
    },
    /// Event `index` names another stream than the batch's first event.
    #[error("event {index} names another source than the batch's first event")]
    MixedSources {
        /// Index in the batch.
        index: usize,
    },
}

/// Checks a batch of finished events against the import rules (module doc), above
/// `high_water`.
pub fn check_imported(
    events: &[Event],
    high_water: Option<Sequence>,
) -> Result<(), ImportViolation> {
    let mut floor = high_water.map_or(0, Sequence::get);
    let source = events.first().map(|e| &e.source);
    if source.is_some_and(|s| annal_schema::OpaqueId::new(s.stream_id()).is_err()) {
        return Err(ImportViolation::NoStream { index: 0 });
    }
    for (index, event) in events.iter().enumerate() {
        event
            .check_write_rules()
            .map_err(|violation| ImportViolation::WriteRules { index, violation })?;
        let sequence = event.data.sequence.get();
        if sequence <= floor {
            return Err(ImportViolation::NotAbove {
                index,
                sequence,
                floor,
            });
        }
        if Some(&event.source) != source {
            return Err(ImportViolation::MixedSources { index });
        }
        floor = sequence;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use annal_schema::{EventDraft, EventTime, OpaqueId, Payload, Platform, SourceUrn, Subject};

    /// A session-started event of `sequence` in stream `stream`.
    pub(crate) fn event(sequence: u64, stream: u8) -> Event {
        let draft = EventDraft {
            subject: Subject::new("session").unwrap(),
            time: EventTime::from_unix(std::time::Duration::from_secs(1_800_000_000)).unwrap(),
            session_id: Some(OpaqueId::from_bytes([7; 16])),
            action_id: None,
            platform: Platform::Linux,
            capability: None,
            application: None,
            payload: Payload::Session {
                phase: annal_schema::SessionPhase::Started,
            },
        };
        draft.into_event(
            OpaqueId::from_bytes([sequence as u8; 16]),
            SourceUrn::for_stream(&OpaqueId::from_bytes([stream; 16])),
            Sequence::new(sequence).unwrap(),
        )
    }

    #[test]
    fn increasing_sequences_of_one_stream_above_the_high_water_pass_with_their_gaps() {
        let batch = [event(3, 1), event(4, 1), event(9, 1)];
        assert_eq!(check_imported(&batch, None), Ok(()));
        assert_eq!(check_imported(&batch, Sequence::new(2)), Ok(()));
        assert_eq!(check_imported(&[], Sequence::new(2)), Ok(()));
    }

    #[test]
    fn a_sequence_at_or_below_the_floor_is_refused() {
        let batch = [event(3, 1), event(4, 1)];
        assert_eq!(
            check_imported(&batch, Sequence::new(3)),
            Err(ImportViolation::NotAbove {
                index: 0,
                sequence: 3,
                floor: 3
            })
        );
        let repeated = [event(3, 1), event(3, 1)];
        assert_eq!(
            check_imported(&repeated, None),
            Err(ImportViolation::NotAbove {
                index: 1,
                sequence: 3,
                floor: 3
            })
        );
        let reversed = [event(5, 1), event(4, 1)];
        assert!(matches!(
            check_imported(&reversed, None),
            Err(ImportViolation::NotAbove { index: 1, .. })
        ));
    }

    #[test]
    fn two_streams_in_one_batch_are_refused() {
        let batch = [event(1, 1), event(2, 2)];
        assert_eq!(
            check_imported(&batch, None),
            Err(ImportViolation::MixedSources { index: 1 })
        );
    }
}
