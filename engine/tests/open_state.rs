//! What a history writer learns of the store itself when it opens (`StoreWriter::open_state`):
//! the highest sequence the store holds, apart from the caller's floor, and the newest
//! lifecycle `control` event among the records the open read. The shell's on/off and gap rules
//! (`docs/design.md`, "One truth about on and off", "No gap without a cause") stand on these.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use annal_engine::storage::Storage;
use annal_engine::store::{ClosedChunk, ControlRead, History, SealedChunk, StoreWriter};
use annal_schema::{ControlOperation, EventDraft, Payload, Sequence, Subject};
use common::{clock, fixture_drafts, fixture_keys, new_store, open_write, writer, writer_config};

fn control(operation: ControlOperation) -> EventDraft {
    let mut draft = fixture_drafts()[0].clone();
    draft.subject = Subject::new("control").unwrap();
    draft.session_id = None;
    draft.action_id = None;
    draft.capability = None;
    draft.application = None;
    draft.payload = Payload::Control { operation };
    draft
}

fn action() -> EventDraft {
    fixture_drafts()
        .into_iter()
        .find(|d| matches!(d.payload, Payload::ActionStarted))
        .unwrap()
}

fn sealed(chunk: &ClosedChunk) -> SealedChunk {
    SealedChunk {
        chunk_id: chunk.chunk_id,
        len_bytes: chunk.len_bytes,
        stream_id: chunk.stream_id.as_str().to_owned(),
        first_sequence: chunk.first_sequence,
        last_sequence: chunk.last_sequence,
    }
}

fn open_skipping(storage: &Arc<dyn Storage>, vouched: &[SealedChunk]) -> StoreWriter<History> {
    StoreWriter::<History>::open_skipping_sealed(
        Arc::clone(storage),
        fixture_keys(),
        writer_config(),
        clock(),
        vouched,
    )
    .unwrap()
}

/// Two generations: the first (closed, as a clean stop leaves it) enables and acts, sequences
/// 1..=2; the second (never closed, as another implementation or a crash leaves it) pauses,
/// acts and flushes, 3..=5.
fn two_generations() -> (tempfile::TempDir, Arc<dyn Storage>, ClosedChunk) {
    let (dir, layout) = new_store();
    let storage = open_write(&layout);
    let mut first = writer(Arc::clone(&storage), 1);
    first
        .append(vec![control(ControlOperation::Enable), action()])
        .unwrap();
    first.sync().unwrap();
    let closed = first.close().unwrap().unwrap();
    drop(first);
    let mut second = writer(Arc::clone(&storage), 2);
    second
        .append(vec![
            control(ControlOperation::Pause),
            action(),
            control(ControlOperation::Flush),
        ])
        .unwrap();
    second.sync().unwrap();
    drop(second);
    (dir, storage, closed)
}

#[test]
fn the_newest_lifecycle_control_event_read_is_reported_and_a_flush_is_not_one() {
    let (_dir, storage, _) = two_generations();
    let writer = writer(Arc::clone(&storage), 3);
    let state = writer.open_state();
    assert_eq!(
        state.newest_control,
        Some(ControlRead {
            operation: ControlOperation::Pause,
            sequence: 3
        })
    );
    assert_eq!(state.stored_high_water, Sequence::new(5));
}

#[test]
fn chunks_a_seal_vouches_for_are_not_read_but_their_sequences_count() {
    let (_dir, storage, closed) = two_generations();
    // Only the first chunk sealed: the second is read, its pause found.
    let writer = open_skipping(&storage, &[sealed(&closed)]);
    assert_eq!(
        writer.open_state().newest_control.map(|r| r.operation),
        Some(ControlOperation::Pause)
    );
    assert_eq!(writer.open_state().stored_high_water, Sequence::new(5));
    drop(writer);

    // A store whose only chunk is sealed: nothing read, no control event reported, and the
    // seal's last sequence is what the store holds.
    let (_dir, layout) = new_store();
    let storage = open_write(&layout);
    let mut first = common::writer(Arc::clone(&storage), 4);
    first
        .append(vec![control(ControlOperation::Disable), action()])
        .unwrap();
    let closed = first.close().unwrap().unwrap();
    drop(first);
    let writer = open_skipping(&storage, &[sealed(&closed)]);
    assert_eq!(writer.open_state().newest_control, None);
    assert_eq!(writer.open_state().stored_high_water, Sequence::new(2));
}

#[test]
fn the_stored_mark_stays_below_a_floor_the_caller_gives() {
    // A crash leaves the journal's reservation above the store: the writer starts above the
    // floor, and reports what the store itself holds, so the skip between can be recorded.
    let (_dir, storage, _) = two_generations();
    let mut config = writer_config();
    config.sequence_floor = Sequence::new(65_541);
    let writer =
        StoreWriter::<History>::open(Arc::clone(&storage), fixture_keys(), config, clock())
            .unwrap();
    assert_eq!(writer.high_water(), Sequence::new(65_541));
    assert_eq!(writer.open_state().stored_high_water, Sequence::new(5));
}
