//! `Event::write_compact_json` (the writer's fast path) writes exactly the bytes serde_json
//! writes through the event's `Serialize` impl: over arbitrary events, including every payload
//! variant, absent and present optional fields, and values that need escaping (quotes,
//! backslashes, control characters, non-ASCII), and over every reference-written record.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use annal_schema::{
    AccessOperation, ActionOutcome, Application, BundleId, CallerCategory, Capability,
    ControlOperation, Delivery, DisplayName, Effect, EscalationKind, Event, EventData, EventTime,
    EvidenceKind, EvidenceKinds, HealthCategory, OpaqueId, Payload, Platform, ProcessModel,
    ReturnedEvents, Route, Sequence, SessionPhase, SourceUrn, Subject,
};
use proptest::prelude::*;

/// Text with the characters that make serde_json escape, mixed with plain and non-ASCII ones.
fn awkward_text(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            4 => proptest::char::range('a', 'z'),
            1 => Just('"'),
            1 => Just('\\'),
            1 => proptest::char::range('\u{0}', '\u{1f}'),
            1 => Just('\u{7f}'),
            1 => Just('é'),
            1 => Just('\u{2028}'),
            1 => Just('😀'),
            1 => Just(' '),
        ],
        1..max,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

fn opaque_id() -> impl Strategy<Value = OpaqueId> {
    any::<[u8; 16]>().prop_map(OpaqueId::from_bytes)
}

fn one_of<T: Copy + std::fmt::Debug + 'static>(all: &'static [T]) -> impl Strategy<Value = T> {
    proptest::sample::select(all)
}

fn application() -> impl Strategy<Value = Option<Application>> {
    (
        proptest::option::of(
            awkward_text(40).prop_filter_map("bundle read rule", |t| BundleId::new_lenient(t).ok()),
        ),
        proptest::option::of(
            awkward_text(40)
                .prop_filter_map("name read rule", |t| DisplayName::new_lenient(t).ok()),
        ),
    )
        .prop_map(|(bundle, name)| Application::new(bundle, name))
}

fn outcome() -> impl Strategy<Value = ActionOutcome> {
    (
        one_of(Effect::ALL),
        one_of(Route::ALL),
        proptest::option::of(one_of(Delivery::ALL)),
        proptest::option::of(any::<u32>()),
        proptest::collection::vec(one_of(EvidenceKind::ALL), 0..4),
        proptest::option::of(one_of(EscalationKind::ALL)),
    )
        .prop_map(
            |(effect, route, delivery, delivered_count, kinds, escalation_kind)| ActionOutcome {
                effect,
                route,
                delivery,
                delivered_count,
                evidence_kinds: EvidenceKinds::new(kinds).unwrap(),
                escalation_kind,
            },
        )
}

fn payload() -> impl Strategy<Value = Payload> {
    prop_oneof![
        one_of(ControlOperation::ALL).prop_map(|operation| Payload::Control { operation }),
        Just(Payload::ActionStarted),
        outcome().prop_map(Payload::ActionCompleted),
        one_of(SessionPhase::ALL).prop_map(|phase| Payload::Session { phase }),
        (one_of(AccessOperation::ALL), 0..=200usize).prop_map(|(operation, n)| {
            Payload::Access {
                operation,
                returned_events: ReturnedEvents::new(n).unwrap(),
            }
        }),
        (one_of(&HealthCategory::ALL), any::<u64>())
            .prop_map(|(category, count)| Payload::Health { category, count }),
    ]
}

fn event() -> impl Strategy<Value = Event> {
    (
        (opaque_id(), opaque_id()),
        awkward_text(60).prop_filter_map("subject read rule", |t| Subject::new_lenient(t).ok()),
        (0u64..4_000_000_000, 0u32..1_000_000_000),
        (
            proptest::option::of(opaque_id()),
            proptest::option::of(opaque_id()),
        ),
        1..=u64::MAX,
        one_of(Platform::ALL),
        proptest::option::of(
            awkward_text(40)
                .prop_filter_map("capability read rule", |t| Capability::new_lenient(t).ok()),
        ),
        application(),
        payload(),
    )
        .prop_map(
            |(
                (id, stream),
                subject,
                (secs, nanos),
                (session_id, action_id),
                sequence,
                platform,
                capability,
                application,
                payload,
            )| Event {
                id,
                source: SourceUrn::for_stream(&stream),
                subject,
                time: EventTime::from_unix(Duration::new(secs, nanos)).unwrap(),
                data: EventData {
                    session_id,
                    action_id,
                    sequence: Sequence::new(sequence).unwrap(),
                    platform,
                    process_model: ProcessModel::InDaemon,
                    capability,
                    caller_category: CallerCategory::CuaRuntime,
                    application,
                    payload,
                },
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn compact_json_is_exactly_what_serde_json_writes(event in event()) {
        let mut fast = b"prefix".to_vec();
        event.write_compact_json(&mut fast);
        let slow = serde_json::to_vec(&event).unwrap();
        prop_assert_eq!(
            String::from_utf8_lossy(&fast[b"prefix".len()..]),
            String::from_utf8_lossy(&slow)
        );
        // And it reads back as the event it was.
        prop_assert_eq!(Event::from_json_slice(&fast[b"prefix".len()..]).unwrap(), event);
    }
}

#[test]
fn every_fixture_record_is_written_identically_by_both_paths() {
    for (index, text) in common::fixture_plaintexts().iter().enumerate() {
        let event = Event::from_json_slice(text.as_bytes()).unwrap();
        let mut fast = Vec::new();
        event.write_compact_json(&mut fast);
        assert_eq!(fast, text.as_bytes(), "record {index}: fast path");
        assert_eq!(
            serde_json::to_vec(&event).unwrap(),
            text.as_bytes(),
            "record {index}: serde path"
        );
    }
}

#[test]
fn a_value_that_needs_escaping_is_escaped_by_serde_json() {
    let mut out = Vec::new();
    let mut event = Event::from_json_slice(common::fixture_plaintexts()[0].as_bytes()).unwrap();
    event.subject = Subject::new_lenient("a\"b\\c\u{1}d\u{7f}é").unwrap();
    event.write_compact_json(&mut out);
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains(r#""subject":"a\"b\\c\u0001d"#),
        "escaped as serde_json does: {text}"
    );
}
