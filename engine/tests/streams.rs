//! One codec, two streams: a second record schema in its own directory with its own keys (the
//! shape the engine journal takes) reuses the writer and reader unchanged, and the two streams'
//! keys never open each other's chunks; and records read back by location.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use annal_engine::keys::{ChunkKeys, JournalKeys};
use annal_engine::profile::{PlaintextFault, RecordSchema, TailRule, scan_chunk};
use annal_engine::storage::Area;
use annal_engine::store::{
    History, ReadAtError, RecordIdentity, RecordLocation, StoreReader, StoreWriter, Stream,
};
use annal_schema::WriteRuleViolation;
use common::*;

/// A record of the test stream.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Note {
    sequence: u64,
    at_ms: u64,
    stream: String,
}

struct NoteSchema;

impl RecordSchema for NoteSchema {
    type Event = Note;
    fn parse(plaintext: &[u8]) -> Result<Note, PlaintextFault> {
        serde_json::from_slice(plaintext).map_err(|_| PlaintextFault::InvalidEvent)
    }
    fn sequence(event: &Note) -> u64 {
        event.sequence
    }
    fn time_since_epoch(event: &Note) -> Duration {
        Duration::from_millis(event.at_ms)
    }
}

/// A journal-shaped stream: its own schema, directory and keys.
struct Notes;

impl Stream for Notes {
    type Schema = NoteSchema;
    type Keys = JournalKeys;
    type Draft = u64;
    const AREA: Area = Area::Journal;
    const NAME: &'static str = "notes";
    fn check_write_rules(_: &u64) -> Result<(), WriteRuleViolation> {
        Ok(())
    }
    fn finish(at_ms: u64, identity: &RecordIdentity) -> Note {
        Note {
            sequence: identity.sequence.get(),
            at_ms,
            stream: identity.stream_id.as_str().to_owned(),
        }
    }
    fn encode(event: &Note, out: &mut Vec<u8>) {
        serde_json::to_writer(out, event).unwrap();
    }
}

fn journal_keys() -> JournalKeys {
    JournalKeys::from_namespace_root(&fixture_key())
}

#[test]
fn a_second_stream_reuses_the_codec_in_its_own_directory_with_its_own_keys() {
    let (_dir, layout) = new_store();
    let storage = open_write(&layout);
    let mut notes =
        StoreWriter::<Notes>::open(storage.clone(), journal_keys(), writer_config(), clock())
            .unwrap();
    let mut history = writer(storage.clone(), 1);
    let receipt = notes.append(vec![10, 20, 30]).unwrap();
    notes.sync().unwrap();
    history.append(fixture_drafts()[..2].to_vec()).unwrap();
    history.sync().unwrap();
    drop((notes, history));
    // Each stream has its own sequences and its own directory.
    let read = StoreReader::<Notes>::new(open_read(&layout))
        .read(&journal_keys())
        .unwrap();
    assert!(!read.has_corruption());
    let got: Vec<(u64, u64)> = read
        .records()
        .map(|r| (r.event.sequence, r.event.at_ms))
        .collect();
    assert_eq!(got, [(1, 10), (2, 20), (3, 30)]);
    assert_eq!(read_events(&layout).len(), 2);
    assert_eq!(
        std::fs::read_dir(layout.sidecar().unwrap().join("journal"))
            .unwrap()
            .count(),
        1
    );
    // The journal chunk does not open with history keys: distinct key types, distinct keys.
    let chunk = receipt.created[0];
    let bytes = std::fs::read(
        layout
            .sidecar()
            .unwrap()
            .join("journal")
            .join(format!("{}.cborseq", chunk.to_hex())),
    )
    .unwrap();
    let with_history_keys = scan_chunk::<NoteSchema>(&bytes, &fixture_keys(), Some(chunk));
    assert!(with_history_keys.records.is_empty());
    let (_, verdict) = with_history_keys.into_verdict(TailRule::MustBeClean);
    assert_eq!(verdict.name(), "corrupt");
    let with_journal_keys = scan_chunk::<NoteSchema>(&bytes, &journal_keys(), Some(chunk));
    assert_eq!(with_journal_keys.records.len(), 3);
    // And the same chunk id with both derivations gives different keys.
    assert_ne!(
        journal_keys().chunk_key(&chunk.0, "s", 1).as_bytes(),
        fixture_keys().chunk_key(&chunk.0, "s", 1).as_bytes()
    );
}

#[test]
fn records_read_back_by_location_and_bad_locations_are_refused() {
    let (_dir, layout) = new_store();
    let mut config = writer_config();
    config.max_records_per_chunk = 5;
    let mut w =
        StoreWriter::<History>::open(open_write(&layout), fixture_keys(), config, clock()).unwrap();
    let drafts = fixture_drafts();
    let receipt = w.append(drafts.clone()).unwrap();
    w.sync().unwrap();
    drop(w);
    let reader = StoreReader::<History>::new(open_read(&layout));
    let keys = fixture_keys();
    let mut handles = std::collections::HashMap::new();
    for (location, draft) in receipt.records.iter().zip(&drafts) {
        let handle = handles
            .entry(location.chunk_id)
            .or_insert_with(|| reader.open_chunk(&keys, location.chunk_id).unwrap());
        let record = handle.read_at(location).unwrap();
        assert_eq!(&record.event.to_draft(), draft);
        assert_eq!(record.sequence(), location.sequence);
        assert_eq!(reader.read_at(&keys, location).unwrap(), record);
    }
    let good = receipt.records[7];
    let refused = |location: RecordLocation| reader.read_at(&keys, &location).unwrap_err();
    assert!(matches!(
        refused(RecordLocation {
            sequence: 99,
            ..good
        }),
        ReadAtError::SequenceMismatch {
            expected: 99,
            found: 8
        }
    ));
    assert!(matches!(
        refused(RecordLocation {
            offset: good.offset + 1,
            ..good
        }),
        ReadAtError::Record(_)
    ));
    assert!(matches!(
        refused(RecordLocation {
            position: good.position + 1,
            ..good
        }),
        ReadAtError::Record(_)
    ));
    assert!(matches!(
        refused(RecordLocation {
            offset: 1 << 40,
            ..good
        }),
        ReadAtError::OutOfBounds
    ));
    assert!(matches!(
        refused(RecordLocation {
            len: 1 << 30,
            ..good
        }),
        ReadAtError::OutOfBounds
    ));
    assert!(matches!(
        refused(RecordLocation {
            chunk_id: annal_engine::profile::ChunkId([7; 16]),
            ..good
        }),
        ReadAtError::Storage(_)
    ));
    // A handle reads only its own chunk.
    let other = receipt.records[0];
    assert_ne!(other.chunk_id, good.chunk_id);
    let handle = reader.open_chunk(&keys, good.chunk_id).unwrap();
    assert!(matches!(
        handle.read_at(&other),
        Err(ReadAtError::OutOfBounds)
    ));
}

#[test]
fn a_chunk_handle_reads_records_appended_after_it_was_opened() {
    let (_dir, layout) = new_store();
    let mut w = writer(open_write(&layout), 31);
    let drafts = fixture_drafts();
    let first = w.append(drafts[..2].to_vec()).unwrap();
    w.sync().unwrap();
    let reader = StoreReader::<History>::new(open_read(&layout));
    let handle = reader
        .open_chunk(&fixture_keys(), first.records[0].chunk_id)
        .unwrap();
    let later = w.append(drafts[2..4].to_vec()).unwrap();
    w.sync().unwrap();
    assert_eq!(later.records[0].chunk_id, first.records[0].chunk_id);
    for location in later.records.iter().chain(&first.records) {
        assert_eq!(
            handle.read_at(location).unwrap().sequence(),
            location.sequence
        );
    }
}
