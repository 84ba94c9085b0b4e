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
//! An unknown, missing or repeated field (a key written twice is refused, never last-one-wins:
//! serde's derived struct visitor refuses it), another version, an unknown or repeated operation
//! or tool, or a duration that does not parse is refused with a message naming the field from
//! the closed schema ([`SchemaFault`]), or saying "an unknown field": never a key or value the
//! manifest holds. An operation is granted only
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
            .map_err(|error| ManifestError::Schema(SchemaFault::from_serde(&error.to_string())))?;
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
    /// Not the closed schema: an unknown, missing or repeated field, or a value of the wrong
    /// type.
    #[error("the manifest does not match its schema: {0}")]
    Schema(SchemaFault),
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

/// Every field path of the closed schema: the only names a refusal may show.
const SCHEMA_PATHS: [&str; 8] = [
    "version",
    "expires_after",
    "idle_timeout",
    "resources",
    "resources.computer_history",
    "resources.computer_history.operations",
    "allow",
    "allow.tools",
];

/// How a manifest breaks its closed schema, named only with [`SCHEMA_PATHS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SchemaFault {
    /// A field the schema does not have, inside `within` (`None`: at the top level).
    UnknownField {
        /// The mapping that holds it.
        within: Option<&'static str>,
    },
    /// A required field is absent.
    MissingField {
        /// Which.
        field: &'static str,
    },
    /// A field is written twice in one mapping.
    RepeatedField {
        /// Which.
        field: &'static str,
    },
    /// A value of the wrong type (or text that is not YAML), at `at` when known.
    WrongValue {
        /// Where.
        at: Option<&'static str>,
    },
}

impl SchemaFault {
    /// Classifies a serde_norway message, keeping no text of it: the path serde puts first is
    /// kept only when it is one of [`SCHEMA_PATHS`] (sequence indices dropped), and the field a
    /// missing or duplicate-field message quotes only when path and field make one of them.
    /// serde quotes the caller's key in an unknown-field message and a wrong value's text: both
    /// are dropped.
    fn from_serde(message: &str) -> Self {
        let (at, rest) = match message.split_once(": ") {
            Some((path, rest)) => match schema_path(&strip_indices(path)) {
                Some(path) => (Some(path), rest),
                None => (None, message),
            },
            None => (None, message),
        };
        let quoted_field = |prefix: &str| {
            let name = rest.strip_prefix(prefix)?.split('`').next()?;
            match at {
                Some(at) => schema_path(&format!("{at}.{name}")),
                None => schema_path(name),
            }
        };
        // A key that is not text at all (`? [a, b]`) fails serde's field-name visitor.
        if rest.starts_with("unknown field") || rest.contains("expected field identifier") {
            Self::UnknownField { within: at }
        } else if let Some(field) = quoted_field("duplicate field `") {
            Self::RepeatedField { field }
        } else if let Some(field) = quoted_field("missing field `") {
            Self::MissingField { field }
        } else {
            Self::WrongValue { at }
        }
    }
}

impl std::fmt::Display for SchemaFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::UnknownField { within: Some(at) } => {
                write!(f, "{at}: an unknown field (the schema is closed)")
            }
            Self::UnknownField { within: None } => {
                f.write_str("an unknown field (the schema is closed)")
            }
            Self::MissingField { field } => write!(f, "{field}: missing"),
            Self::RepeatedField { field } => {
                write!(f, "{field}: repeated (write each field once)")
            }
            Self::WrongValue { at: Some(at) } => write!(f, "{at}: wrong type or value"),
            Self::WrongValue { at: None } => f.write_str("not YAML, or a value of the wrong type"),
        }
    }
}

/// `path` as one of [`SCHEMA_PATHS`], or `None`.
fn schema_path(path: &str) -> Option<&'static str> {
    SCHEMA_PATHS.into_iter().find(|known| *known == path)
}

/// `path` without its sequence indices (`allow.tools[1]` -> `allow.tools`).
fn strip_indices(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut in_index = false;
    for c in path.chars() {
        match c {
            '[' => in_index = true,
            ']' => in_index = false,
            c if !in_index => out.push(c),
            _ => {}
        }
    }
    out
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
