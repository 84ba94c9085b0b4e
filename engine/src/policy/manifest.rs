//! The bounded-mode manifest: what a trusted launcher approved for one agent.
//!
//! YAML or JSON (JSON is read as the YAML it is), closed at every level:
//!
//! ```yaml
//! version: 3
//! expires_after: 1h
//! idle_timeout: 10m
//! resources:
//!   computer_history:
//!     operations: [status, query]
//! allow:
//!   tools: [history_status, history_query]
//! ```
//!
//! An unknown field, another version, an unknown or repeated operation or tool, or a duration
//! that does not parse is refused with a message naming the field. An operation is granted only
//! when the manifest names both its tool in `allow.tools` and the operation in
//! `resources.computer_history.operations`, exactly as the reference requires.

use std::collections::BTreeSet;

use serde::Deserialize;

use super::{GrantTerms, Operation};

/// Seed 000's example manifest: both operations, one hour, idle ten minutes. What `annal demo`
/// approves, and the tests' starting point.
pub const CONTRACT_EXAMPLE_MANIFEST: &str = "version: 3
expires_after: 1h
idle_timeout: 10m
resources:
  computer_history:
    operations:
      - status
      - query
allow:
  tools:
    - history_status
    - history_query
";

/// The only manifest version this engine reads.
pub const MANIFEST_VERSION: u32 = 3;

/// Most bytes of a manifest file (a valid one is a few hundred).
pub const MANIFEST_MAX_LEN_BYTES: usize = 16 * 1024;

/// Most characters of a duration (`90m`, `1h`, `3600s`).
const DURATION_MAX_LEN_CHARS: usize = 12;

/// An approved manifest: the operations it grants and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// Operations named in both lists.
    operations: Vec<Operation>,
    /// The lifetime and idle timeout of the grants it makes.
    terms: GrantTerms,
}

impl Manifest {
    /// The operations it grants (named as a tool AND as an operation), in listing order.
    pub fn operations(&self) -> &[Operation] {
        &self.operations
    }

    /// The terms of the grants it makes.
    pub fn terms(&self) -> GrantTerms {
        self.terms
    }

    /// Parses and checks a manifest.
    pub fn parse(text: &str) -> Result<Self, ManifestError> {
        if text.len() > MANIFEST_MAX_LEN_BYTES {
            return Err(ManifestError::TooLarge);
        }
        let raw: RawManifest = serde_norway::from_str(text)
            .map_err(|error| ManifestError::Schema(schema_message(&error.to_string())))?;
        if raw.version != MANIFEST_VERSION {
            return Err(ManifestError::Version);
        }
        let expires_after =
            parse_duration_secs(&raw.expires_after).ok_or(ManifestError::Duration {
                field: "expires_after",
            })?;
        let idle_timeout =
            parse_duration_secs(&raw.idle_timeout).ok_or(ManifestError::Duration {
                field: "idle_timeout",
            })?;
        let terms = GrantTerms::new(expires_after, idle_timeout).map_err(|error| match error {
            super::InvalidTerms::ExpiresAfter => ManifestError::Duration {
                field: "expires_after",
            },
            _ => ManifestError::Duration {
                field: "idle_timeout",
            },
        })?;
        let named_operations = named(
            &raw.resources.computer_history.operations,
            Operation::from_name,
            "resources.computer_history.operations",
        )?;
        let named_tools = named(&raw.allow.tools, Operation::from_tool, "allow.tools")?;
        let operations = Operation::ALL
            .into_iter()
            .filter(|op| named_operations.contains(op) && named_tools.contains(op))
            .collect();
        Ok(Self { operations, terms })
    }
}

/// Why a manifest was refused. Names the field, never echoes a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ManifestError {
    /// Longer than [`MANIFEST_MAX_LEN_BYTES`].
    #[error("the manifest is larger than 16 KiB")]
    TooLarge,
    /// Not the closed schema: an unknown or missing field, or a value of the wrong type.
    #[error("the manifest does not match its schema: {0}")]
    Schema(String),
    /// `version` is not 3.
    #[error("version: only version 3 manifests are supported")]
    Version,
    /// A duration did not parse or is out of range.
    #[error(
        "{field}: a duration is a whole number followed by s, m, h or d (1s to 30d; idle_timeout no longer than expires_after)"
    )]
    Duration {
        /// Which field.
        field: &'static str,
    },
    /// An operation or tool this engine does not know.
    #[error(
        "{field}: unknown name (operations: status, query; tools: history_status, history_query)"
    )]
    UnknownName {
        /// Which list.
        field: &'static str,
    },
    /// A name listed twice.
    #[error("{field}: a name is repeated")]
    Repeated {
        /// Which list.
        field: &'static str,
    },
}

/// The operations a list names through `lookup`, refusing an unknown or repeated name.
fn named(
    names: &[String],
    lookup: fn(&str) -> Option<Operation>,
    field: &'static str,
) -> Result<BTreeSet<Operation>, ManifestError> {
    let mut operations = BTreeSet::new();
    for name in names {
        let operation = lookup(name).ok_or(ManifestError::UnknownName { field })?;
        if !operations.insert(operation) {
            return Err(ManifestError::Repeated { field });
        }
    }
    Ok(operations)
}

/// The part of a serde message that names the field: the YAML path and, for an unknown or
/// missing field, serde's sentence naming it. A wrong value's text (which serde quotes) is
/// dropped, so a refused manifest never echoes what it held.
fn schema_message(serde_message: &str) -> String {
    let message = serde_message
        .split(" at line ")
        .next()
        .unwrap_or(serde_message);
    if message.contains("unknown field") || message.contains("missing field") {
        return message.to_owned();
    }
    match message.split_once(": ") {
        Some((path, _)) if !path.contains(' ') => format!("{path}: wrong type or value"),
        _ => "wrong type or value".to_owned(),
    }
}

/// `<digits><s|m|h|d>` in seconds, or `None`.
pub fn parse_duration_secs(text: &str) -> Option<u64> {
    if text.is_empty() || text.len() > DURATION_MAX_LEN_CHARS || !text.is_ascii() {
        return None;
    }
    let (digits, unit) = text.split_at(text.len() - 1);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let count: u64 = digits.parse().ok()?;
    let unit_secs = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return None,
    };
    count.checked_mul(unit_secs)
}

/// The manifest as written (private: only [`Manifest::parse`] reads it).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    version: u32,
    expires_after: String,
    idle_timeout: String,
    resources: RawResources,
    allow: RawAllow,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawResources {
    computer_history: RawComputerHistory,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawComputerHistory {
    operations: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAllow {
    tools: Vec<String>,
}
