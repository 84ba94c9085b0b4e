//! The compact JSON of an [`Event`], written straight into a buffer: the writer's hot path.
//!
//! [`Event::write_compact_json`] writes byte for byte what `serde_json` writes for the event's
//! `Serialize` impl (the reference's field order): `tests/valid_corpus.rs` checks it over
//! arbitrary events (both its strategies, with values that need escaping) and
//! `tests/compact_json.rs` over every reference-written record. It
//! exists because serde_json runs its escape scan over every byte of every key and constant of
//! an event (about 25 strings and 660 bytes, ~7,700 instructions, the largest single cost of an
//! append; docs/benchmarks.md): here keys and constants are byte literals and only the values
//! are scanned. Escaping itself stays serde_json's: a value that needs any is written by it.

use crate::event::{
    ActionOutcome, Application, DATA_CONTENT_TYPE, DATASCHEMA_V0, Event, EventData, Payload,
    SPEC_VERSION,
};

/// Whether serde_json would escape `byte` inside a string: control characters, `"` and `\`
/// (its `ESCAPE` table; nothing else, not even DEL or non-ASCII).
fn needs_escape(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

/// Appends `value` as a JSON string. The scan folds without an early exit, so it vectorizes;
/// the values written here are short and almost never need escaping.
fn string(out: &mut Vec<u8>, value: &str) {
    let escape = value.bytes().fold(false, |any, b| any | needs_escape(b));
    if escape {
        // A `&str` always serializes; into a Vec the write cannot fail.
        if serde_json::to_writer(&mut *out, value).is_err() {
            debug_assert!(false, "serializing a string into memory failed");
        }
        return;
    }
    trusted(out, value);
}

/// Appends a value that cannot need escaping: hex ids, the `urn:` source and the wire enums'
/// constant strings (their types admit no other characters; the debug assertion below meets
/// every constant in `tests/valid_corpus.rs`).
fn trusted(out: &mut Vec<u8>, value: &str) {
    debug_assert!(
        !value.bytes().any(needs_escape),
        "a trusted value needs escaping"
    );
    out.push(b'"');
    out.extend_from_slice(value.as_bytes());
    out.push(b'"');
}

/// Appends an unsigned integer as serde_json does (plain decimal).
fn integer(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

/// The length a typical action event's JSON needs (~660 bytes): reserved once, so the
/// appends below rarely grow the buffer.
const EVENT_JSON_RESERVE_BYTES: usize = 768;

impl Event {
    /// Appends the event's compact JSON to `out`: exactly the bytes of `serde_json::to_vec`
    /// of this event, faster (see the module doc).
    pub fn write_compact_json(&self, out: &mut Vec<u8>) {
        out.reserve(EVENT_JSON_RESERVE_BYTES);
        out.extend_from_slice(b"{\"specversion\":");
        trusted(out, SPEC_VERSION);
        out.extend_from_slice(b",\"id\":");
        trusted(out, self.id.as_str());
        out.extend_from_slice(b",\"source\":");
        trusted(out, self.source.as_str());
        out.extend_from_slice(b",\"type\":");
        trusted(out, self.event_type().as_str());
        out.extend_from_slice(b",\"subject\":");
        string(out, self.subject.as_str());
        out.extend_from_slice(b",\"time\":");
        string(out, self.time.as_str());
        out.extend_from_slice(b",\"datacontenttype\":");
        trusted(out, DATA_CONTENT_TYPE);
        out.extend_from_slice(b",\"dataschema\":");
        trusted(out, DATASCHEMA_V0);
        out.extend_from_slice(b",\"data\":");
        data(out, &self.data);
        out.push(b'}');
    }
}

/// The `data` object, in `EventData`'s field order; absent options are skipped. `sequence` is
/// always present and follows the only optional fields that can come first, so every other
/// key is written with its comma.
fn data(out: &mut Vec<u8>, data: &EventData) {
    out.push(b'{');
    if let Some(session) = &data.session_id {
        out.extend_from_slice(b"\"session_id\":");
        trusted(out, session.as_str());
        out.push(b',');
    }
    if let Some(action) = &data.action_id {
        out.extend_from_slice(b"\"action_id\":");
        trusted(out, action.as_str());
        out.push(b',');
    }
    out.extend_from_slice(b"\"sequence\":");
    integer(out, data.sequence.get());
    out.extend_from_slice(b",\"platform\":");
    trusted(out, data.platform.as_str());
    out.extend_from_slice(b",\"process_model\":");
    trusted(out, data.process_model.as_str());
    if let Some(capability) = &data.capability {
        out.extend_from_slice(b",\"capability\":");
        string(out, capability.as_str());
    }
    out.extend_from_slice(b",\"caller_category\":");
    trusted(out, data.caller_category.as_str());
    if let Some(application) = &data.application {
        out.extend_from_slice(b",\"application\":");
        self::application(out, application);
    }
    out.extend_from_slice(b",\"payload\":");
    payload(out, &data.payload);
    out.push(b'}');
}

/// At least one of the two fields is present (`Application::new`).
fn application(out: &mut Vec<u8>, application: &Application) {
    out.push(b'{');
    if let Some(bundle) = application.bundle_id() {
        out.extend_from_slice(b"\"bundle_id\":");
        string(out, bundle.as_str());
        if application.display_name().is_some() {
            out.push(b',');
        }
    }
    if let Some(name) = application.display_name() {
        out.extend_from_slice(b"\"display_name\":");
        string(out, name.as_str());
    }
    out.push(b'}');
}

/// The payload object, as `Payload`'s `Serialize` writes it: `kind`, then the variant's fields.
fn payload(out: &mut Vec<u8>, payload: &Payload) {
    out.extend_from_slice(b"{\"kind\":");
    trusted(out, payload.kind());
    match payload {
        Payload::Control { operation } => {
            out.extend_from_slice(b",\"operation\":");
            trusted(out, operation.as_str());
        }
        Payload::ActionStarted => {}
        Payload::ActionCompleted(outcome) => self::outcome(out, outcome),
        Payload::Session { phase } => {
            out.extend_from_slice(b",\"phase\":");
            trusted(out, phase.as_str());
        }
        Payload::Access {
            operation,
            returned_events,
        } => {
            out.extend_from_slice(b",\"operation\":");
            trusted(out, operation.as_str());
            out.extend_from_slice(b",\"returned_events\":");
            integer(out, u64::from(returned_events.get()));
        }
        Payload::Health { category, count } => {
            out.extend_from_slice(b",\"category\":");
            trusted(out, category.as_str());
            out.extend_from_slice(b",\"count\":");
            integer(out, *count);
        }
    }
    out.push(b'}');
}

fn outcome(out: &mut Vec<u8>, outcome: &ActionOutcome) {
    out.extend_from_slice(b",\"effect\":");
    trusted(out, outcome.effect.as_str());
    out.extend_from_slice(b",\"route\":");
    trusted(out, outcome.route.as_str());
    if let Some(delivery) = outcome.delivery {
        out.extend_from_slice(b",\"delivery\":");
        trusted(out, delivery.as_str());
    }
    if let Some(count) = outcome.delivered_count {
        out.extend_from_slice(b",\"delivered_count\":");
        integer(out, u64::from(count));
    }
    out.extend_from_slice(b",\"evidence_kinds\":[");
    for (index, kind) in outcome.evidence_kinds.as_slice().iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        trusted(out, kind.as_str());
    }
    out.push(b']');
    if let Some(escalation) = outcome.escalation_kind {
        out.extend_from_slice(b",\"escalation_kind\":");
        trusted(out, escalation.as_str());
    }
}
