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
//!
//! [`Importer`] is the whole write side of an import into a new store: the store's own key
//! first, created in the credential store and read back (durable) before any chunk names it,
//! then the events in batches of at most [`IMPORT_BATCH_EVENTS`], then a sync, the close, and
//! the retention the caller asks for, journaled. It reports success only when everything it
//! wrote is durable; after any error the caller throws the store away whole (`annal import`
//! builds it aside and renames it into place only after [`Importer::finish`]).

use std::num::NonZeroU64;
use std::sync::Arc;

use annal_schema::{Event, Sequence, WriteRuleViolation};

use crate::clock::Clock;
use crate::journal::{CallerKind, Journal, JournalEntry, JournalEvent};
use crate::keys::{
    KeyChoice, KeyCustody, KeyError, KeyProvider, Namespace, OpenMode, StoreKeyScope,
};
use crate::storage::Storage;
use crate::store::{AppendError, History, OpenWriterError, StoreWriter, WriterConfig};

/// Most events an [`Importer`] holds before it writes them (one
/// [`StoreWriter::append_imported`] batch).
pub const IMPORT_BATCH_EVENTS: usize = 256;

/// Why an import's write failed. The store being built is to be thrown away whole.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The store's key could not be created (or read back) in the credential store: nothing
    /// was written.
    #[error("the new store's key: {0}")]
    Key(KeyError),
    /// The writer could not open.
    #[error("opening the new store's writer: {0}")]
    Open(OpenWriterError),
    /// A batch was refused or could not be written.
    #[error("writing the events: {0}")]
    Append(AppendError),
    /// The journal (the retention record) could not be written.
    #[error("writing the new store's journal: {0}")]
    Journal(String),
}

/// The write side of an import into a new store (module doc).
pub struct Importer {
    storage: Arc<dyn Storage>,
    custody: KeyCustody,
    clock: Arc<dyn Clock>,
    writer: StoreWriter<History>,
    batch: Vec<Event>,
    written: u64,
}

impl std::fmt::Debug for Importer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Importer")
            .field("written", &self.written)
            .finish_non_exhaustive()
    }
}

impl Importer {
    /// Creates the store's own key in `provider` (read back before it is used), then opens
    /// the history writer on `storage` (which holds the writer lock of a new, empty store
    /// whose `scope` carries its id).
    pub fn open(
        storage: Arc<dyn Storage>,
        provider: &dyn KeyProvider,
        namespace: &Namespace,
        scope: &StoreKeyScope,
        clock: Arc<dyn Clock>,
    ) -> Result<Self, ImportError> {
        let custody = crate::keys::open_store_key(
            provider,
            namespace,
            scope,
            OpenMode::Write {
                create: true,
                choice: KeyChoice::Own,
            },
        )
        .map_err(ImportError::Key)?;
        let config = WriterConfig::new(custody.reference().clone(), NonZeroU64::MIN);
        let writer = StoreWriter::<History>::open(
            Arc::clone(&storage),
            custody.history_keys(),
            config,
            Arc::clone(&clock),
        )
        .map_err(ImportError::Open)?;
        Ok(Self {
            storage,
            custody,
            clock,
            writer,
            batch: Vec::with_capacity(IMPORT_BATCH_EVENTS),
            written: 0,
        })
    }

    /// The key the store's chunks are written under.
    pub fn custody(&self) -> &KeyCustody {
        &self.custody
    }

    /// Takes the next event (in the archive's order); writes the batch held when it is full
    /// or the event starts another stream.
    pub fn push(&mut self, event: Event) -> Result<(), ImportError> {
        let other_stream = self.batch.first().is_some_and(|b| b.source != event.source);
        if other_stream || self.batch.len() >= IMPORT_BATCH_EVENTS {
            self.write_batch()?;
        }
        self.batch.push(event);
        Ok(())
    }

    fn write_batch(&mut self) -> Result<(), ImportError> {
        let batch = std::mem::take(&mut self.batch);
        let len = batch.len() as u64;
        self.writer
            .append_imported(batch)
            .map_err(ImportError::Append)?;
        self.written += len;
        Ok(())
    }

    /// Writes what is held, syncs and closes the writer, then journals `retention_days` when
    /// given (synced). The number of events written, all of them durable.
    pub fn finish(mut self, retention_days: Option<u32>) -> Result<u64, ImportError> {
        self.write_batch()?;
        self.writer.sync().map_err(ImportError::Append)?;
        self.writer.close().map_err(ImportError::Append)?;
        if let Some(days) = retention_days {
            let failed = |e: &dyn std::fmt::Display| ImportError::Journal(e.to_string());
            let config = WriterConfig::new(self.custody.reference().clone(), NonZeroU64::MIN);
            let now_ms = self.clock.now_ms();
            let mut journal = StoreWriter::<Journal>::open(
                Arc::clone(&self.storage),
                self.custody.journal_keys(),
                config,
                Arc::clone(&self.clock),
            )
            .map_err(|e| failed(&e))?;
            journal
                .append(vec![JournalEntry {
                    time_ms: now_ms,
                    event: JournalEvent::RetentionSet {
                        days,
                        caller: CallerKind::OwnerCli,
                    },
                }])
                .map_err(|e| failed(&e))?;
            journal.sync().map_err(|e| failed(&e))?;
        }
        Ok(self.written)
    }
}

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
