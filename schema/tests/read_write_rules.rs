//! Read rules against the published JSON Schema, and write rules against read rules, over
//! generated input (the named corpus in `negative_corpus.rs` pins the interesting cases).
//!
//! - A time is read exactly when the schema's `format: date-time` accepts it, except before the
//!   Unix epoch.
//! - A name is read exactly when the schema's length bound accepts it and, for the application
//!   fields, the reference's rule (trimmed, one line) holds.
//! - Everything the write rules accept, the read rules accept: annal reads back what it writes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use annal_schema::{
    Application, BundleId, Capability, DisplayName, EventTime, InvalidApplication, InvalidId,
    Subject,
};
use proptest::prelude::*;
use serde_json::{Value, json};

/// A validator for one string schema, with format validation on (as the event schema is used).
fn string_schema(schema: Value) -> jsonschema::Validator {
    jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(&schema)
        .unwrap()
}

/// RFC 3339-shaped text with every part allowed to stray just outside its range.
fn time_like() -> impl Strategy<Value = String> {
    let zone = prop_oneof![
        Just("Z".to_owned()),
        Just("z".to_owned()),
        Just(String::new()),
        (
            prop_oneof![Just('+'), Just('-')],
            0u32..=25,
            prop_oneof![0u32..=59, Just(60)]
        )
            .prop_map(|(sign, h, m)| format!("{sign}{h:02}:{m:02}")),
    ];
    (
        (
            prop_oneof![1969u32..=2030, 0u32..=9999],
            0u32..=13,
            0u32..=32,
            prop_oneof![Just('T'), Just('t'), Just(' ')],
        ),
        (
            prop_oneof![0u32..=24, Just(23)],
            prop_oneof![0u32..=60, Just(59)],
            prop_oneof![0u32..=61, Just(60)],
        ),
        proptest::option::of("[0-9]{0,12}"),
        zone,
    )
        .prop_map(|((y, mo, d, sep), (h, mi, s), fraction, zone)| {
            let fraction = fraction.map(|f| format!(".{f}")).unwrap_or_default();
            format!("{y:04}-{mo:02}-{d:02}{sep}{h:02}:{mi:02}:{s:02}{fraction}{zone}")
        })
}

/// Whether the instant is certainly from 1971 on, whatever its offset.
fn surely_after_epoch(text: &str) -> bool {
    text.get(0..4)
        .and_then(|y| y.parse::<u32>().ok())
        .is_some_and(|y| y >= 1971)
}

/// Strings from a small alphabet that makes every rule's edge likely.
fn name_like(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            Just('a'),
            Just('Z'),
            Just('.'),
            Just(' '),
            Just('\t'),
            Just('\n'),
            Just('\r'),
            Just('\u{1b}'),
            Just('\u{a0}'),
            Just('é'),
            Just('/'),
            Just('?'),
            Just('='),
            Just('-'),
        ],
        0..=max,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

fn reference_rule(s: &str) -> bool {
    s.trim() == s && !s.contains(['\r', '\n'])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn time_is_read_exactly_when_the_schema_accepts_it(text in time_like()) {
        let schema = string_schema(json!({"type": "string", "format": "date-time"}));
        let schema_accepts = schema.is_valid(&json!(text));
        let read = EventTime::parse_lenient(&text);
        if read.is_ok() {
            prop_assert!(schema_accepts, "read but schema refuses: {}", text);
        } else if surely_after_epoch(&text) {
            prop_assert!(!schema_accepts, "schema accepts but refused: {}", text);
        }
        if let Ok(strict) = EventTime::parse(&text) {
            prop_assert_eq!(read, Ok(strict));
        }
    }

    #[test]
    fn names_are_read_exactly_by_the_schema_bound_and_the_reference_rule(
        text in name_like(6),
        pad in 0usize..=3,
    ) {
        // Lengths around each bound: prefix 'x' up to one below the bound, or up to two above.
        for (max, schema) in [(120, "display_name"), (128, "capability"), (160, "other")] {
            let fill = (max - 1 + pad).saturating_sub(text.chars().count());
            let long = format!("{}{text}", "x".repeat(fill));
            for candidate in [text.clone(), long] {
                let bound = string_schema(json!({"type": "string", "minLength": 1, "maxLength": max}));
                let within = bound.is_valid(&json!(candidate));
                match schema {
                    "display_name" => {
                        prop_assert_eq!(
                            DisplayName::new_lenient(candidate.clone()).is_ok(),
                            within && reference_rule(&candidate)
                        );
                        if DisplayName::new(candidate.clone()).is_ok() {
                            prop_assert!(DisplayName::new_lenient(candidate.clone()).is_ok());
                        }
                    }
                    "capability" => {
                        prop_assert_eq!(Capability::new_lenient(candidate.clone()).is_ok(), within);
                        if Capability::new(candidate.clone()).is_ok() {
                            prop_assert!(within);
                        }
                    }
                    _ => {
                        prop_assert_eq!(
                            BundleId::new_lenient(candidate.clone()).is_ok(),
                            within && reference_rule(&candidate)
                        );
                        prop_assert_eq!(Subject::new_lenient(candidate.clone()).is_ok(), within);
                        if BundleId::new(candidate.clone()).is_ok() {
                            prop_assert!(BundleId::new_lenient(candidate.clone()).is_ok());
                        }
                        if Subject::new(candidate.clone()).is_ok() {
                            prop_assert!(Subject::new_lenient(candidate.clone()).is_ok());
                        }
                    }
                }
            }
        }
    }
}

/// The Rust capture API's identity constructor applies the write rules and names the refused
/// field and its fix, never the value.
#[test]
fn application_from_names_refuses_forbidden_shapes_naming_the_field() {
    let some = |s: &str| Some(s.to_owned());
    let cases = [
        (
            some("https://evil.example/inbox?tok=1"),
            None,
            InvalidApplication::BundleId(InvalidId::Url),
        ),
        (
            some("/home/alice/secret.txt"),
            some("Editor"),
            InvalidApplication::BundleId(InvalidId::Path),
        ),
        (
            some("org.example.Mail"),
            some("Invoice - Inbox - Gmail"),
            InvalidApplication::DisplayName(InvalidId::WindowTitle),
        ),
        (
            None,
            some("C:\\Users\\alice\\secret.txt"),
            InvalidApplication::DisplayName(InvalidId::Path),
        ),
        (
            None,
            some("Mail?tok=1"),
            InvalidApplication::DisplayName(InvalidId::QueryString),
        ),
        (None, None, InvalidApplication::Empty),
    ];
    for (bundle_id, display_name, want) in cases {
        let got = Application::from_names(bundle_id, display_name).unwrap_err();
        assert_eq!(got, want);
        let shown = format!("{got} {got:?}");
        assert!(shown.contains(want.field()), "{shown}");
        for planted in ["evil", "alice", "Invoice", "tok"] {
            assert!(!shown.contains(planted), "{shown}");
        }
    }
    let real = Application::from_names(
        some("com.microsoft.VSCodeInsiders"),
        some("Visual Studio Code"),
    )
    .unwrap();
    assert_eq!(real.display_name().unwrap().as_str(), "Visual Studio Code");
}
