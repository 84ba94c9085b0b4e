//! Streams: which records a chunk directory holds, sealed with which keys.
//!
//! The writer and reader are generic over a [`Stream`], so the history stream and the engine
//! journal share one implementation, and the type system keeps them apart: a history writer can
//! only be given [`HistoryKeys`], a journal writer only journal keys.

use annal_schema::{
    ControlOperation, EventDraft, OpaqueId, Payload, Sequence, SourceUrn, WriteRuleViolation,
};

use crate::keys::{ChunkKeys, HistoryKeys};
use crate::profile::{HistorySchema, RecordSchema};
use crate::storage::Area;

/// The identity the writer gives a record when it dequeues it: capture knows none of these.
/// The stream's id and `source` are borrowed from the writer's generation: they are the same
/// for every record of it, so they are made once, not per record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordIdentity<'g> {
    /// The event id (unique within its stream).
    pub id: OpaqueId,
    /// The stream of the chunk it goes into (one per writer generation).
    pub stream_id: &'g OpaqueId,
    /// The same stream as a v0 `source`.
    pub source: &'g SourceUrn,
    /// Its sequence: strictly increasing and never reused.
    pub sequence: Sequence,
}

/// One encrypted stream of records in one chunk directory.
pub trait Stream: 'static {
    /// What its records' plaintexts are.
    type Schema: RecordSchema;
    /// The only keys its chunks may be sealed and opened with.
    type Keys: ChunkKeys + Send + Sync + 'static;
    /// A record before the writer assigned its identity.
    type Draft: Send;
    /// The directory its chunks live in.
    const AREA: Area;
    /// A short name for messages and temp files (`chunks`, `journal`).
    const NAME: &'static str;

    /// Annal's write rules, checked before any sequence is assigned (stricter than what the
    /// reader accepts).
    fn check_write_rules(draft: &Self::Draft) -> Result<(), WriteRuleViolation>;

    /// The event a draft becomes once it has its identity.
    fn finish(draft: Self::Draft, identity: &RecordIdentity) -> EventOf<Self>;

    /// Serializes `event` (once: the writer never parses its own output back) into `out`.
    fn encode(event: &EventOf<Self>, out: &mut Vec<u8>);

    /// The lifecycle operation `event` records, when it is the contract's `control` event of
    /// one (`enable`, `disable`, `pause`, `resume`, `delete`; never `flush`, which says
    /// nothing about on and off). Only the history stream has such events.
    fn lifecycle_control(event: &EventOf<Self>) -> Option<ControlOperation> {
        let _ = event;
        None
    }
}

/// The parsed record type of a stream.
pub type EventOf<S> = <<S as Stream>::Schema as RecordSchema>::Event;

/// The history stream: v0 events in `computer-history/chunks/`, history chunk keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct History;

impl Stream for History {
    type Schema = HistorySchema;
    type Keys = HistoryKeys;
    type Draft = EventDraft;
    const AREA: Area = Area::Chunks;
    const NAME: &'static str = "chunks";

    fn check_write_rules(draft: &EventDraft) -> Result<(), WriteRuleViolation> {
        draft.check_write_rules()
    }

    fn finish(draft: EventDraft, identity: &RecordIdentity) -> annal_schema::Event {
        draft.into_event(
            identity.id.clone(),
            identity.source.clone(),
            identity.sequence,
        )
    }

    fn encode(event: &annal_schema::Event, out: &mut Vec<u8>) {
        event.write_compact_json(out);
        // One check in debug builds and tests that what is written reads back as itself.
        debug_assert_eq!(
            HistorySchema::parse(out).as_ref(),
            Ok(event),
            "the writer's own JSON must read back as the event it wrote"
        );
    }

    fn lifecycle_control(event: &annal_schema::Event) -> Option<ControlOperation> {
        match event.data.payload {
            Payload::Control { operation } if operation != ControlOperation::Flush => {
                Some(operation)
            }
            _ => None,
        }
    }
}
