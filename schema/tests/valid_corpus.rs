//! A property-generated corpus of valid events: every one our types can build validates against
//! the published JSON Schema and survives a JSON round trip unchanged.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::OnceLock;
use std::time::Duration;

use annal_schema::*;
use proptest::prelude::*;

/// Cases per run; the issue asks for at least 1,000 valid events.
const VALID_CORPUS_CASES: u32 = 1_000;

fn schema() -> &'static jsonschema::Validator {
    static SCHEMA: OnceLock<jsonschema::Validator> = OnceLock::new();
    SCHEMA.get_or_init(common::event_schema)
}

fn opaque_id() -> impl Strategy<Value = OpaqueId> {
    any::<[u8; 16]>().prop_map(OpaqueId::from_bytes)
}

fn time() -> impl Strategy<Value = EventTime> {
    // 1970 to ~2400, any nanosecond.
    (0u64..13_600_000_000, 0u32..1_000_000_000)
        .prop_map(|(s, n)| EventTime::from_unix(Duration::new(s, n)).unwrap())
}

fn pick<T: Copy + std::fmt::Debug + 'static>(all: &'static [T]) -> impl Strategy<Value = T> {
    proptest::sample::select(all)
}

fn application() -> impl Strategy<Value = Option<Application>> {
    let bundle = proptest::option::of("[!-~]{1,160}".prop_map(|s| BundleId::new(s).unwrap()));
    let name = proptest::option::of(
        // Trimmed, as the write rules require: no space at either end.
        "[\\p{L}\\p{N}.&'-]([\\p{L}\\p{N} .&'-]{0,118}[\\p{L}\\p{N}.&'-])?"
            .prop_map(|s| DisplayName::new(s).unwrap()),
    );
    (bundle, name).prop_map(|(b, n)| Application::new(b, n))
}

fn payload() -> impl Strategy<Value = Payload> {
    let outcome = (
        pick(Effect::ALL),
        pick(Route::ALL),
        proptest::option::of(pick(Delivery::ALL)),
        proptest::option::of(any::<u32>()),
        proptest::collection::vec(pick(EvidenceKind::ALL), 0..=16),
        proptest::option::of(pick(EscalationKind::ALL)),
    )
        .prop_map(
            |(effect, route, delivery, delivered_count, kinds, escalation_kind)| {
                Payload::ActionCompleted(ActionOutcome {
                    effect,
                    route,
                    delivery,
                    delivered_count,
                    evidence_kinds: EvidenceKinds::new(kinds).unwrap(),
                    escalation_kind,
                })
            },
        );
    prop_oneof![
        pick(ControlOperation::ALL).prop_map(|operation| Payload::Control { operation }),
        Just(Payload::ActionStarted),
        outcome,
        pick(SessionPhase::ALL).prop_map(|phase| Payload::Session { phase }),
        (pick(AccessOperation::ALL), 0usize..=200).prop_map(|(operation, n)| Payload::Access {
            operation,
            returned_events: ReturnedEvents::new(n).unwrap(),
        }),
        (pick(&HealthCategory::ALL), any::<u64>())
            .prop_map(|(category, count)| Payload::Health { category, count }),
    ]
}

fn event() -> impl Strategy<Value = Event> {
    (
        (opaque_id(), opaque_id(), "[a-z][a-z0-9/._-]{0,159}", time()),
        (
            proptest::option::of(opaque_id()),
            proptest::option::of(opaque_id()),
            1u64..=u64::MAX,
            pick(&[Platform::Macos, Platform::Windows, Platform::Linux]),
            proptest::option::of("[a-z][a-z0-9._-]{0,127}"),
            application(),
            payload(),
        ),
    )
        .prop_map(
            |(
                (id, stream, subject, time),
                (session_id, action_id, seq, platform, capability, application, payload),
            )| Event {
                id,
                source: SourceUrn::for_stream(&stream),
                subject: Subject::new(subject).unwrap(),
                time,
                data: EventData {
                    session_id,
                    action_id,
                    sequence: Sequence::new(seq).unwrap(),
                    platform,
                    process_model: ProcessModel::InDaemon,
                    capability: capability.map(|c| Capability::new(c).unwrap()),
                    caller_category: CallerCategory::CuaRuntime,
                    application,
                    payload,
                },
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(VALID_CORPUS_CASES))]

    #[test]
    fn generated_events_validate_against_the_schema_and_round_trip(event in event()) {
        let bytes = event.to_json_vec();
        let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        prop_assert!(schema().is_valid(&value), "schema refused {}", String::from_utf8_lossy(&bytes));
        let back = Event::from_json_slice(&bytes).unwrap();
        prop_assert_eq!(&back, &event);
        prop_assert_eq!(back.to_json_vec(), bytes);
        prop_assert_eq!(
            value["type"].as_str().unwrap(),
            event.event_type().as_str()
        );
    }
}
