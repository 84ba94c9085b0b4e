//! Validation of a decrypted record plaintext as a v0 history event.
//!
//! This is the one place the reader and the writer decide whether bytes are a history event
//! (assert before writing, check after reading). The closed contract is `annal_schema::Event`;
//! when parsing fails, `dataschema` is inspected so a future schema is reported as unsupported
//! rather than as broken. The plaintext itself stays as bytes so what a reader returns is
//! byte-identical to what was written.

use annal_schema::{DATASCHEMA_V0, Event};
use serde_json::Value;

/// Why a plaintext is not a v0 history event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlaintextFault {
    /// Not JSON, or JSON that breaks the closed v0 contract.
    InvalidEvent,
    /// `dataschema` names a schema other than v0.
    UnsupportedDataschema,
}

/// Validates one plaintext against the closed v0 event contract.
pub fn validate_plaintext(bytes: &[u8]) -> Result<Event, PlaintextFault> {
    match Event::from_json_slice(bytes) {
        Ok(event) => Ok(event),
        Err(_) => {
            // Only on the failure path: tell an unknown schema apart from a broken event.
            let value: Value =
                serde_json::from_slice(bytes).map_err(|_| PlaintextFault::InvalidEvent)?;
            match value.get("dataschema") {
                Some(Value::String(schema)) if schema != DATASCHEMA_V0 => {
                    Err(PlaintextFault::UnsupportedDataschema)
                }
                _ => Err(PlaintextFault::InvalidEvent),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dataschema_is_told_apart_from_a_broken_event() {
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
    fn unknown_field_is_refused() {
        let extra = br#"{"specversion":"1.0","id":"2645d7d2275f3eca5f668ff450660365","source":"urn:cua-driver:history:6dd3aa1eef99854a9a3d39ba1e2315f1","type":"cua-driver.history.control.v0","subject":"control","time":"2026-11-30T22:14:03.753613635Z","datacontenttype":"application/json","dataschema":"urn:cua-driver:schema:history-event:v0","data":{"sequence":1,"platform":"linux","process_model":"in_daemon","caller_category":"cua_runtime","payload":{"kind":"control","operation":"enable"}},"extra":1}"#;
        assert_eq!(validate_plaintext(extra), Err(PlaintextFault::InvalidEvent));
        let ok = &extra[..extra.len() - 11];
        let mut ok = ok.to_vec();
        ok.push(b'}');
        assert_eq!(validate_plaintext(&ok).unwrap().data.sequence.get(), 1);
    }
}
