//! Arbitrary input never panics the event parser, and whatever it accepts is a valid event that
//! re-serializes and re-parses to itself.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use annal_schema::Event;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(event) = Event::from_json_slice(&bytes) {
            let again = Event::from_json_slice(&event.to_json_vec()).unwrap();
            prop_assert_eq!(again, event);
        }
    }

    /// JSON-shaped text built from the contract's own vocabulary reaches deeper into the parser
    /// than random bytes do.
    #[test]
    fn contract_shaped_text_never_panics(parts in proptest::collection::vec(
        prop_oneof![
            Just("{".to_owned()), Just("}".to_owned()), Just("[".to_owned()), Just("]".to_owned()),
            Just(",".to_owned()), Just(":".to_owned()), Just("null".to_owned()),
            Just("\"data\"".to_owned()), Just("\"payload\"".to_owned()), Just("\"kind\"".to_owned()),
            Just("\"sequence\"".to_owned()), Just("\"action_completed\"".to_owned()),
            Just("\"evidence_kinds\"".to_owned()), Just("\"time\"".to_owned()),
            Just("\"2026-11-30T22:14:03Z\"".to_owned()), Just("1".to_owned()), Just("-1".to_owned()),
            Just("1e400".to_owned()), Just("\"\\u0000\"".to_owned()),
            "\"[a-z_]{0,12}\"".prop_map(|s| s),
        ],
        0..64,
    )) {
        let text = parts.concat();
        let _ = Event::from_json_slice(text.as_bytes());
    }
}
