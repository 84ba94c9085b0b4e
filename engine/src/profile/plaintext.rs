//! Validation of a decrypted record plaintext as a v0 history event.
//!
//! This is the one place the reader and the writer decide whether bytes are a history event.
//! It checks `dataschema` first, so a future schema is reported as unsupported rather than as
//! broken, then the fields the store relies on (ordering and duplicate detection).
//! The full closed-schema check moves here when `annal_schema::Event` lands.

use serde_json::Value;

use super::DATASCHEMA_V0;

/// The fields of a validated event that the store needs. The plaintext itself stays as bytes,
/// so what is returned is byte-identical to what was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatedEvent {
    /// `data.sequence`: the store-wide order (>= 1).
    pub sequence: u64,
    /// CloudEvents `id`: with `source`, the identity used to spot duplicates.
    pub id: String,
    /// CloudEvents `source`.
    pub source: String,
    /// CloudEvents `time` (RFC 3339).
    pub time: String,
    /// `data.session_id`, the keyed opaque session id, when present.
    pub session_id: Option<String>,
}

/// Why a plaintext is not a v0 history event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlaintextFault {
    /// Not JSON, not an object, or a required field is missing or of the wrong type.
    InvalidEvent,
    /// `dataschema` is present but not the v0 schema.
    UnsupportedDataschema,
}

/// Validates one plaintext.
pub fn validate_plaintext(bytes: &[u8]) -> Result<ValidatedEvent, PlaintextFault> {
    let value: Value = serde_json::from_slice(bytes).map_err(|_| PlaintextFault::InvalidEvent)?;
    let Value::Object(map) = value else {
        return Err(PlaintextFault::InvalidEvent);
    };
    match map.get("dataschema") {
        Some(Value::String(schema)) if schema == DATASCHEMA_V0 => {}
        Some(Value::String(_)) => return Err(PlaintextFault::UnsupportedDataschema),
        _ => return Err(PlaintextFault::InvalidEvent),
    }
    if map.get("specversion").and_then(Value::as_str) != Some("1.0") {
        return Err(PlaintextFault::InvalidEvent);
    }
    let text = |name: &str| -> Result<String, PlaintextFault> {
        map.get(name)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or(PlaintextFault::InvalidEvent)
    };
    let data = map
        .get("data")
        .and_then(Value::as_object)
        .ok_or(PlaintextFault::InvalidEvent)?;
    let sequence = data
        .get("sequence")
        .and_then(Value::as_u64)
        .filter(|s| *s >= 1)
        .ok_or(PlaintextFault::InvalidEvent)?;
    let session_id = match data.get("session_id") {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => return Err(PlaintextFault::InvalidEvent),
    };
    Ok(ValidatedEvent {
        sequence,
        id: text("id")?,
        source: text("source")?,
        time: text("time")?,
        session_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dataschema_is_checked_before_the_rest() {
        let future = br#"{"dataschema":"urn:cua-driver:schema:history-event:v1"}"#;
        assert_eq!(
            validate_plaintext(future),
            Err(PlaintextFault::UnsupportedDataschema)
        );
        let broken = br#"{"dataschema":"urn:cua-driver:schema:history-event:v0"}"#;
        assert_eq!(
            validate_plaintext(broken),
            Err(PlaintextFault::InvalidEvent)
        );
        assert_eq!(
            validate_plaintext(b"not json"),
            Err(PlaintextFault::InvalidEvent)
        );
    }

    #[test]
    fn minimal_event_validates() {
        let ok = br#"{"specversion":"1.0","id":"a","source":"s","time":"t","dataschema":"urn:cua-driver:schema:history-event:v0","data":{"sequence":3}}"#;
        let event = validate_plaintext(ok).unwrap();
        assert_eq!(event.sequence, 3);
        assert_eq!(event.session_id, None);
        let zero = br#"{"specversion":"1.0","id":"a","source":"s","time":"t","dataschema":"urn:cua-driver:schema:history-event:v0","data":{"sequence":0}}"#;
        assert_eq!(validate_plaintext(zero), Err(PlaintextFault::InvalidEvent));
    }
}
