//! Every plaintext the reference implementation wrote parses into our closed types and
//! re-serializes to the identical bytes, and validates against the published JSON Schema.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use annal_schema::{Event, EventType};

#[test]
fn every_fixture_event_round_trips_byte_identically() {
    let plaintexts = common::fixture_plaintexts();
    assert_eq!(plaintexts.len(), 16, "the fixture holds 16 records");
    for (index, text) in plaintexts.iter().enumerate() {
        let event = Event::from_json_slice(text.as_bytes())
            .unwrap_or_else(|e| panic!("record {index} refused: {e}"));
        assert_eq!(
            String::from_utf8(event.to_json_vec()).unwrap(),
            *text,
            "record {index} did not round-trip byte-identically"
        );
        assert_eq!(event.data.sequence.get(), index as u64 + 1);
    }
}

#[test]
fn fixture_covers_all_seven_types() {
    let mut seen: Vec<EventType> = common::fixture_plaintexts()
        .iter()
        .map(|t| Event::from_json_slice(t.as_bytes()).unwrap().event_type())
        .collect();
    seen.sort_by_key(|t| t.as_str());
    seen.dedup();
    assert_eq!(seen.len(), EventType::ALL.len());
}

#[test]
fn every_fixture_event_validates_against_the_published_schema() {
    let schema = common::event_schema();
    for (index, text) in common::fixture_plaintexts().iter().enumerate() {
        let value: serde_json::Value = serde_json::from_str(text).unwrap();
        assert!(
            schema.is_valid(&value),
            "record {index} fails the JSON Schema"
        );
    }
}

#[test]
fn every_fixture_event_survives_the_draft_round_trip_and_passes_the_write_rules() {
    for (index, text) in common::fixture_plaintexts().iter().enumerate() {
        let event = Event::from_json_slice(text.as_bytes()).unwrap();
        let draft = event.to_draft();
        assert_eq!(draft.check_write_rules(), Ok(()), "record {index}");
        assert_eq!(event.check_write_rules(), Ok(()), "record {index}");
        let back = draft.into_event(event.id.clone(), event.source.clone(), event.data.sequence);
        assert_eq!(back, event, "record {index}");
        assert_eq!(String::from_utf8(back.to_json_vec()).unwrap(), *text);
    }
}
