//! A property-generated corpus of valid events: every one our types can build validates against
//! the published JSON Schema and survives a JSON round trip and a draft round trip unchanged.
//! Events built from write-rule values pass the write rules; events built from read-rule values
//! (as a reference chunk may hold) get the write verdict their fields imply.
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
    // Printable ASCII without `/`, `\\` and `?`: no path, URL or query string.
    let bundle =
        proptest::option::of("[!-.0->@-\\[\\]-~]{1,160}".prop_map(|s| BundleId::new(s).unwrap()));
    let name = proptest::option::of(
        // Trimmed, as the write rules require: no space at either end; no window title's
        // separator between words (a ` - ` is refused, `Wi-Fi` is not).
        "[\\p{L}\\p{N}.&'-]([\\p{L}\\p{N} .&'-]{0,118}[\\p{L}\\p{N}.&'-])?"
            .prop_filter("not title-shaped", |s| {
                !s.split(' ').any(|word| word == "-" || word == "--")
            })
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
            pick(Platform::ALL),
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

/// Names and capabilities as the reference may write them: anything the read rules allow, from
/// an alphabet that reaches every write rule's edge and every character JSON must escape.
fn lenient_text(max_chars: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(
        prop_oneof![
            4 => proptest::char::range('a', 'z'),
            1 => Just('A'),
            1 => Just('.'),
            1 => Just(' '),
            1 => Just('-'),
            1 => Just('\t'),
            1 => Just('\u{1b}'),
            1 => Just('\u{7f}'),
            1 => Just('"'),
            1 => Just('\\'),
            1 => Just('/'),
            1 => Just('?'),
            1 => Just('='),
            1 => Just('|'),
            1 => Just('é'),
            1 => Just('\u{2028}'),
            1 => Just('😀'),
        ],
        1..=max_chars,
    )
    .prop_map(|chars| chars.into_iter().collect())
}

/// An RFC 3339 time in any of the forms the read rules allow.
fn lenient_time() -> impl Strategy<Value = EventTime> {
    (
        1971u32..=9999,
        1u32..=12,
        1u32..=28,
        (0u32..24, 0u32..60, 0u32..60),
        prop_oneof![Just('T'), Just('t')],
        proptest::option::of("[0-9]{1,12}"),
        prop_oneof![
            Just("Z".to_owned()),
            Just("z".to_owned()),
            (prop_oneof![Just('+'), Just('-')], 0u32..24, 0u32..60)
                .prop_map(|(sign, h, m)| format!("{sign}{h:02}:{m:02}")),
        ],
    )
        .prop_map(|(y, mo, d, (h, mi, s), sep, fraction, zone)| {
            let fraction = fraction.map(|f| format!(".{f}")).unwrap_or_default();
            let text = format!("{y:04}-{mo:02}-{d:02}{sep}{h:02}:{mi:02}:{s:02}{fraction}{zone}");
            EventTime::parse_lenient(&text).unwrap()
        })
}

/// Events as annal may read them from a reference chunk: every name and time field drawn from
/// the read rules, so some break annal's write rules.
fn lenient_event() -> impl Strategy<Value = Event> {
    let trimmed = |max| lenient_text(max).prop_filter("trimmed", |s| s.trim() == s);
    let application = (
        proptest::option::of(trimmed(160).prop_map(|s| BundleId::new_lenient(s).unwrap())),
        proptest::option::of(trimmed(120).prop_map(|s| DisplayName::new_lenient(s).unwrap())),
    )
        .prop_map(|(b, n)| Application::new(b, n));
    (
        event(),
        // Often keep the write-rule subject and time, so the later fields' verdicts are reached.
        proptest::option::weighted(
            0.3,
            lenient_text(160).prop_map(|s| Subject::new_lenient(s).unwrap()),
        ),
        proptest::option::weighted(0.5, lenient_time()),
        proptest::option::of(lenient_text(128).prop_map(|s| Capability::new_lenient(s).unwrap())),
        application,
    )
        .prop_map(|(mut event, subject, time, capability, application)| {
            event.subject = subject.unwrap_or(event.subject);
            event.time = time.unwrap_or(event.time);
            event.data.capability = capability;
            event.data.application = application;
            event
        })
}

/// What `check_write_rules` must say, worked out from the strict constructors field by field.
fn expected_write_verdict(event: &Event) -> Result<(), WriteRuleViolation> {
    if Subject::new(event.subject.as_str()).is_err() {
        return Err(WriteRuleViolation::Subject);
    }
    if EventTime::parse(event.time.as_str()).is_err() {
        return Err(WriteRuleViolation::Time);
    }
    if let Some(c) = &event.data.capability
        && Capability::new(c.as_str()).is_err()
    {
        return Err(WriteRuleViolation::Capability);
    }
    let application = event.data.application.as_ref();
    if let Some(b) = application.and_then(Application::bundle_id)
        && BundleId::new(b.as_str()).is_err()
    {
        return Err(WriteRuleViolation::BundleId);
    }
    if let Some(n) = application.and_then(Application::display_name)
        && DisplayName::new(n.as_str()).is_err()
    {
        return Err(WriteRuleViolation::DisplayName);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(VALID_CORPUS_CASES))]

    /// Every event built from write-rule values passes the write rules and survives the draft
    /// round trip.
    #[test]
    fn generated_events_pass_the_write_rules_and_the_draft_round_trip(event in event()) {
        prop_assert_eq!(event.check_write_rules(), Ok(()));
        let draft = event.to_draft();
        prop_assert_eq!(draft.check_write_rules(), Ok(()));
        let back = draft.into_event(event.id.clone(), event.source.clone(), event.data.sequence);
        prop_assert_eq!(back, event);
    }

    /// Every event built from read-rule values validates against the schema, round-trips
    /// through JSON and through a draft, and gets the write verdict its fields imply.
    #[test]
    fn leniently_read_events_validate_round_trip_and_get_their_write_verdict(event in lenient_event()) {
        let bytes = event.to_json_vec();
        // The writer's compact JSON is exactly what serde_json writes for the event.
        let through_serde = serde_json::to_vec(&event).unwrap();
        prop_assert_eq!(
            String::from_utf8_lossy(&bytes),
            String::from_utf8_lossy(&through_serde)
        );
        let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        prop_assert!(schema().is_valid(&value), "schema refused {}", String::from_utf8_lossy(&bytes));
        let back = Event::from_json_slice(&bytes).unwrap();
        prop_assert_eq!(&back, &event);
        prop_assert_eq!(back.to_json_vec(), bytes);
        let verdict = expected_write_verdict(&event);
        prop_assert_eq!(event.check_write_rules(), verdict);
        let draft = event.to_draft();
        prop_assert_eq!(draft.check_write_rules(), verdict);
        prop_assert_eq!(
            draft.into_event(event.id.clone(), event.source.clone(), event.data.sequence),
            event
        );
    }

    #[test]
    fn generated_events_validate_against_the_schema_and_round_trip(event in event()) {
        let bytes = event.to_json_vec();
        prop_assert_eq!(&bytes, &serde_json::to_vec(&event).unwrap());
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
