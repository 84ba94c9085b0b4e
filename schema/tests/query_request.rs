//! The `history_query` request parser's accept/reject table, boundary values included.
//! Nothing is ever clamped: every out-of-range value is refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use annal_schema::ErrorCode;
use annal_schema::tools::{QueryRequest, parse_status_request};
use serde_json::{Value, json};

const INVALID: ErrorCode = ErrorCode::InvalidHistoryQuery;
const RANGE: ErrorCode = ErrorCode::InvalidHistoryQueryRange;

fn parse(v: Value) -> Result<QueryRequest, ErrorCode> {
    QueryRequest::parse(&v)
}

#[test]
fn defaults() {
    let r = parse(json!({})).unwrap();
    assert_eq!(r.limit(), 50);
    assert_eq!(
        (r.session_id(), r.since_sequence(), r.until_sequence()),
        (None, None, None)
    );
}

#[test]
fn accepted_values() {
    let table = [
        (json!({"limit": 1}), 1, None, None, None),
        (json!({"limit": 200}), 200, None, None, None),
        (json!({"limit": 50}), 50, None, None, None),
        (
            json!({"session_id": "x"}),
            50,
            Some("x".to_owned()),
            None,
            None,
        ),
        (
            json!({"session_id": "s".repeat(128)}),
            50,
            Some("s".repeat(128)),
            None,
            None,
        ),
        (
            json!({"session_id": "é".repeat(128)}),
            50,
            Some("é".repeat(128)),
            None,
            None,
        ),
        (json!({"since_sequence": 1}), 50, None, Some(1), None),
        (json!({"until_sequence": 1}), 50, None, None, Some(1)),
        (
            json!({"since_sequence": 5, "until_sequence": 5}),
            50,
            None,
            Some(5),
            Some(5),
        ),
        (
            json!({"since_sequence": 4, "until_sequence": 9}),
            50,
            None,
            Some(4),
            Some(9),
        ),
        (
            json!({"until_sequence": u64::MAX}),
            50,
            None,
            None,
            Some(u64::MAX),
        ),
        (
            json!({"limit": 20, "session_id": "33333333333333333333333333333333", "since_sequence": 40}),
            20,
            Some("33333333333333333333333333333333".to_owned()),
            Some(40),
            None,
        ),
    ];
    for (input, limit, session, since, until) in table {
        let r = parse(input.clone()).unwrap_or_else(|e| panic!("{input} refused: {e}"));
        assert_eq!(r.limit(), limit, "{input}");
        assert_eq!(r.session_id(), session.as_deref(), "{input}");
        assert_eq!(r.since_sequence(), since, "{input}");
        assert_eq!(r.until_sequence(), until, "{input}");
    }
}

#[test]
fn refused_values() {
    let table = [
        (json!({"limit": 0}), INVALID),
        (json!({"limit": 201}), INVALID),
        (json!({"limit": 256}), INVALID),
        (json!({"limit": -1}), INVALID),
        (json!({"limit": 1.5}), INVALID),
        (json!({"limit": 10.0}), INVALID),
        (json!({"limit": "10"}), INVALID),
        (json!({"limit": true}), INVALID),
        (json!({"limit": null}), INVALID),
        (json!({"limit": [10]}), INVALID),
        (json!({"session_id": ""}), INVALID),
        (json!({"session_id": "s".repeat(129)}), INVALID),
        (json!({"session_id": 7}), INVALID),
        (json!({"session_id": null}), INVALID),
        (json!({"since_sequence": 0}), INVALID),
        (json!({"since_sequence": -5}), INVALID),
        (json!({"since_sequence": "3"}), INVALID),
        (json!({"since_sequence": null}), INVALID),
        (json!({"until_sequence": 0}), INVALID),
        (json!({"until_sequence": 2.0}), INVALID),
        (json!({"since_sequence": 9, "until_sequence": 2}), RANGE),
        (json!({"since_sequence": 2, "until_sequence": 1}), RANGE),
        // A bad value wins over a reversed range: the input is invalid before it is reversed.
        (json!({"since_sequence": 9, "until_sequence": 0}), INVALID),
        (json!({"url": "https://bad"}), INVALID),
        (json!({"limit": 1, "url": "https://bad"}), INVALID),
        (json!({"Limit": 10}), INVALID),
        (json!({"cursor": "abc"}), INVALID),
        (json!({"all": true}), INVALID),
        (json!([]), INVALID),
        (json!(null), INVALID),
        (json!("limit=10"), INVALID),
        (json!(10), INVALID),
    ];
    for (input, code) in table {
        assert_eq!(parse(input.clone()), Err(code), "{input}");
    }
}

#[test]
fn debug_never_shows_the_session_label() {
    const LABEL: &str = "alice-private-session-label";
    let r = parse(json!({"session_id": LABEL, "limit": 7, "since_sequence": 3})).unwrap();
    assert_eq!(r.session_id(), Some(LABEL));
    let shown = format!("{r:?} {r:#?}");
    assert!(!shown.contains(LABEL), "{shown}");
    assert!(!shown.contains("alice"), "{shown}");
    assert!(shown.contains("session_id: Some(<redacted>)"), "{shown}");
    // The other fields stay visible: they are numbers, not content.
    assert!(shown.contains("limit: 7"), "{shown}");
    assert!(shown.contains("since_sequence: Some(3)"), "{shown}");
    let none = format!("{:?}", parse(json!({})).unwrap());
    assert!(none.contains("session_id: None"), "{none}");
}

#[test]
fn status_takes_only_an_empty_object() {
    assert_eq!(parse_status_request(&json!({})), Ok(()));
    for bad in [json!({"verbose": true}), json!(null), json!([]), json!("")] {
        assert_eq!(parse_status_request(&bad), Err(INVALID), "{bad}");
    }
}

#[test]
fn input_schemas_are_closed() {
    for schema in [
        annal_schema::tools::history_status_input_schema(),
        annal_schema::tools::history_query_input_schema(),
    ] {
        assert_eq!(schema["additionalProperties"], json!(false));
        assert_eq!(schema["type"], json!("object"));
    }
    let q = annal_schema::tools::history_query_input_schema();
    assert_eq!(q["properties"]["limit"]["maximum"], json!(200));
    assert_eq!(q["properties"]["limit"]["minimum"], json!(1));
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Any integer limit is accepted exactly when it is in 1..=200, and then kept as given:
        /// never clamped.
        #[test]
        fn limit_is_accepted_iff_in_range_and_never_clamped(limit in any::<i64>()) {
            let parsed = parse(json!({ "limit": limit }));
            if (1..=200).contains(&limit) {
                prop_assert_eq!(i64::from(parsed.unwrap().limit()), limit);
            } else {
                prop_assert_eq!(parsed, Err(INVALID));
            }
        }

        /// Any pair of bounds >= 1 is accepted exactly when since <= until, both kept as given.
        #[test]
        fn bounds_are_kept_or_refused_as_a_range(since in 1u64..1_000, until in 1u64..1_000) {
            let parsed = parse(json!({ "since_sequence": since, "until_sequence": until }));
            if since <= until {
                let r = parsed.unwrap();
                prop_assert_eq!((r.since_sequence(), r.until_sequence()), (Some(since), Some(until)));
            } else {
                prop_assert_eq!(parsed, Err(RANGE));
            }
        }

        /// Any object with a key outside the four fields is refused.
        #[test]
        fn unknown_keys_are_refused(key in "[a-z_]{1,20}") {
            prop_assume!(!["limit", "session_id", "since_sequence", "until_sequence"].contains(&key.as_str()));
            let mut object = serde_json::Map::new();
            object.insert(key, json!(1));
            prop_assert_eq!(parse(Value::Object(object)), Err(INVALID));
        }
    }
}

/// The exact `history_query` input schema MCP clients are shown (now derived by schemars from
/// `QueryRequest`): the same JSON the hand-written schema had.
#[test]
fn the_query_input_schema_is_exactly_the_contracts() {
    assert_eq!(
        annal_schema::tools::history_query_input_schema(),
        json!({
            "type": "object",
            "properties": {
                "limit": {"type": "integer", "minimum": 1, "maximum": 200, "default": 50},
                "session_id": {"type": "string", "minLength": 1, "maxLength": 128},
                "since_sequence": {"type": "integer", "minimum": 1},
                "until_sequence": {"type": "integer", "minimum": 1}
            },
            "additionalProperties": false
        })
    );
    assert_eq!(
        annal_schema::tools::history_status_input_schema(),
        json!({"type": "object", "properties": {}, "additionalProperties": false})
    );
}

/// The derived schema and the parser agree: a JSON Schema validator accepts exactly the
/// arguments `QueryRequest::parse` accepts (the order of the two bounds aside, which a schema
/// cannot say).
#[test]
fn the_derived_query_schema_accepts_what_the_parser_accepts() {
    let validator =
        jsonschema::validator_for(&annal_schema::tools::history_query_input_schema()).unwrap();
    let long = "s".repeat(129);
    for arguments in [
        json!({}),
        json!({"limit": 1}),
        json!({"limit": 200}),
        json!({"limit": 0}),
        json!({"limit": 201}),
        json!({"limit": 1.5}),
        json!({"limit": "5"}),
        json!({"limit": null}),
        json!({"session_id": ""}),
        json!({"session_id": "s"}),
        json!({"session_id": "é".repeat(128)}),
        json!({"session_id": long}),
        json!({"session_id": null}),
        json!({"since_sequence": 0}),
        json!({"since_sequence": 1, "until_sequence": 9}),
        json!({"until_sequence": -1}),
        json!({"until_sequence": null}),
        json!({"cursor": "abc"}),
        json!({"window_title": "Inbox"}),
    ] {
        assert_eq!(
            validator.is_valid(&arguments),
            QueryRequest::parse(&arguments).is_ok(),
            "{arguments}"
        );
    }
    let status =
        jsonschema::validator_for(&annal_schema::tools::history_status_input_schema()).unwrap();
    for arguments in [json!({}), json!({"verbose": true}), json!(null), json!([])] {
        assert_eq!(
            status.is_valid(&arguments),
            parse_status_request(&arguments).is_ok(),
            "{arguments}"
        );
    }
}
