//! `Event::write_compact_json` (the writer's fast path, behind `Event::to_json_vec`) writes
//! exactly the bytes serde_json writes through the event's `Serialize` impl. The property over
//! arbitrary events, every payload and values that need escaping, is in `valid_corpus.rs` (both
//! of its event strategies); here: every reference-written record, both paths, and one escape.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use annal_schema::{Event, Subject};

#[test]
fn every_fixture_record_is_written_identically_by_both_paths() {
    for (index, text) in common::fixture_plaintexts().iter().enumerate() {
        let event = Event::from_json_slice(text.as_bytes()).unwrap();
        let mut fast = b"kept".to_vec();
        event.write_compact_json(&mut fast);
        assert_eq!(&fast[..4], b"kept", "record {index}: appends, never clears");
        assert_eq!(&fast[4..], text.as_bytes(), "record {index}: fast path");
        assert_eq!(
            serde_json::to_vec(&event).unwrap(),
            text.as_bytes(),
            "record {index}: serde path"
        );
    }
}

#[test]
fn a_value_that_needs_escaping_is_escaped_as_serde_json_does() {
    let mut event = Event::from_json_slice(common::fixture_plaintexts()[0].as_bytes()).unwrap();
    event.subject = Subject::new_lenient("a\"b\\c\u{1}d\u{7f}é").unwrap();
    let text = String::from_utf8(event.to_json_vec()).unwrap();
    assert!(
        text.contains(r#""subject":"a\"b\\c\u0001d"#),
        "escaped as serde_json does: {text}"
    );
    assert_eq!(text.as_bytes(), serde_json::to_vec(&event).unwrap());
}
