//! The two history tools: names, capabilities, request parsing, responses and input schemas.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::event::Event;
use crate::{ErrorCode, HealthCategory};

/// Name of the status tool.
pub const HISTORY_STATUS_TOOL: &str = "history_status";
/// Name of the query tool.
pub const HISTORY_QUERY_TOOL: &str = "history_query";
/// Capability that authorizes `history_status`.
pub const HISTORY_STATUS_CAPABILITY: &str = "history.status";
/// Capability that authorizes `history_query`.
pub const HISTORY_QUERY_CAPABILITY: &str = "history.query";
/// The storage profile identifier reported by `history_status`.
pub const STORAGE_PROFILE_ID: &str =
    "cua-history-profile-v1/cbor-sequence+cose-encrypt0+cloudevents-json";

/// Default query-visible retention, in days.
pub const DEFAULT_RETENTION_DAYS: u32 = 7;
/// Default encrypted store quota, in bytes (100 MiB).
pub const DEFAULT_QUOTA_BYTES: u64 = 104_857_600;

/// Smallest `limit`.
pub const QUERY_LIMIT_MIN_EVENTS: u8 = 1;
/// Largest `limit`. Also the largest `returned_events` an access event records
/// ([`crate::event::RETURNED_EVENTS_MAX`] is this value): one read returns at most one limit.
pub const QUERY_LIMIT_MAX_EVENTS: u8 = 200;
/// `limit` when the request gives none.
pub const QUERY_LIMIT_DEFAULT_EVENTS: u8 = 50;
/// Longest `session_id` in a request, in characters.
pub const QUERY_SESSION_ID_MAX_LEN_CHARS: usize = 128;

/// The structured result of `history_status`. Always the same eleven fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusResponse {
    /// The platform adapter supports history.
    pub supported: bool,
    /// The daemon admits the feature.
    pub admitted: bool,
    /// The owner enabled capture.
    pub enabled: bool,
    /// New capture is paused.
    pub paused: bool,
    /// Payloads use the encrypted profile (always true).
    pub encrypted: bool,
    /// The storage profile identifier.
    pub profile: String,
    /// Query-visible retention, in days.
    pub retention_days: u32,
    /// Encrypted store quota, in bytes.
    pub quota_bytes: u64,
    /// Encrypted bytes under the store root.
    pub bytes_used: u64,
    /// Events dropped by the non-blocking capture path.
    pub dropped_events: u64,
    /// The fixed health category.
    pub health: HealthCategory,
}

/// A validated `history_query` request.
///
/// The fields are private so [`QueryRequest::parse`] is the only way to build one: holding a
/// request proves its values are in range. `Debug` is written by hand because `session_id` may be
/// a raw session label, which must never reach a log.
///
/// Its JSON Schema ([`history_query_input_schema`]) is derived from these fields and their
/// bounds, the same constants [`QueryRequest::parse`] checks.
#[derive(Clone, PartialEq, Eq, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct QueryRequest {
    #[schemars(
        range(min = QUERY_LIMIT_MIN_EVENTS, max = QUERY_LIMIT_MAX_EVENTS),
        default = "default_limit"
    )]
    limit: u8,
    #[schemars(length(min = 1, max = QUERY_SESSION_ID_MAX_LEN_CHARS))]
    session_id: Option<String>,
    #[schemars(range(min = 1))]
    since_sequence: Option<u64>,
    #[schemars(range(min = 1))]
    until_sequence: Option<u64>,
}

/// `limit` when the request gives none (the schema's `default`).
fn default_limit() -> u8 {
    QUERY_LIMIT_DEFAULT_EVENTS
}

impl fmt::Debug for QueryRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueryRequest")
            .field("limit", &self.limit)
            .field("session_id", &self.session_id.as_ref().map(|_| Redacted))
            .field("since_sequence", &self.since_sequence)
            .field("until_sequence", &self.until_sequence)
            .finish()
    }
}

/// Stands in for a value that must not be shown.
struct Redacted;

impl fmt::Debug for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl QueryRequest {
    /// Parses tool arguments. Unknown fields, wrong types, `null` and out-of-range values are
    /// refused with [`ErrorCode::InvalidHistoryQuery`]; `since_sequence > until_sequence` with
    /// [`ErrorCode::InvalidHistoryQueryRange`]. Nothing is clamped.
    pub fn parse(args: &Value) -> Result<Self, ErrorCode> {
        const INVALID: ErrorCode = ErrorCode::InvalidHistoryQuery;
        let object: &Map<String, Value> = args.as_object().ok_or(INVALID)?;
        let mut request = QueryRequest {
            limit: QUERY_LIMIT_DEFAULT_EVENTS,
            session_id: None,
            since_sequence: None,
            until_sequence: None,
        };
        for (key, value) in object {
            match key.as_str() {
                "limit" => {
                    let limit = value.as_u64().ok_or(INVALID)?;
                    let limit = u8::try_from(limit).map_err(|_| INVALID)?;
                    if !(QUERY_LIMIT_MIN_EVENTS..=QUERY_LIMIT_MAX_EVENTS).contains(&limit) {
                        return Err(INVALID);
                    }
                    request.limit = limit;
                }
                "session_id" => {
                    let session = value.as_str().ok_or(INVALID)?;
                    let len = session.chars().count();
                    if len == 0 || len > QUERY_SESSION_ID_MAX_LEN_CHARS {
                        return Err(INVALID);
                    }
                    request.session_id = Some(session.to_owned());
                }
                "since_sequence" => request.since_sequence = Some(sequence_bound(value)?),
                "until_sequence" => request.until_sequence = Some(sequence_bound(value)?),
                _ => return Err(INVALID),
            }
        }
        if let (Some(since), Some(until)) = (request.since_sequence, request.until_sequence)
            && since > until
        {
            return Err(ErrorCode::InvalidHistoryQueryRange);
        }
        Ok(request)
    }

    /// How many of the newest matching events to return
    /// ([`QUERY_LIMIT_MIN_EVENTS`]..=[`QUERY_LIMIT_MAX_EVENTS`]).
    pub fn limit(&self) -> u8 {
        self.limit
    }

    /// The opaque session id or raw session label to filter by (1..=128 characters). A raw
    /// label is private: hash it before comparing, never log it.
    pub fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    /// Inclusive lower bound on `data.sequence` (>= 1).
    pub fn since_sequence(&self) -> Option<u64> {
        self.since_sequence
    }

    /// Inclusive upper bound on `data.sequence` (>= 1, and >= `since_sequence` when both are
    /// given).
    pub fn until_sequence(&self) -> Option<u64> {
        self.until_sequence
    }
}

/// A sequence bound: a JSON integer >= 1 (not a float, string or bool).
fn sequence_bound(value: &Value) -> Result<u64, ErrorCode> {
    value
        .as_u64()
        .filter(|v| *v >= 1)
        .ok_or(ErrorCode::InvalidHistoryQuery)
}

/// Validates `history_status` arguments: exactly an empty object.
pub fn parse_status_request(args: &Value) -> Result<(), ErrorCode> {
    match args.as_object() {
        Some(object) if object.is_empty() => Ok(()),
        _ => Err(ErrorCode::InvalidHistoryQuery),
    }
}

/// The structured result of `history_query`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryResponse {
    /// The newest matching events, ascending by `data.sequence`.
    pub events: Vec<Event>,
}

impl Serialize for QueryResponse {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = s.serialize_struct("QueryResponse", 3)?;
        st.serialize_field("events", &self.events)?;
        st.serialize_field("metadata_only", &true)?;
        st.serialize_field("model_context_disclosure", &true)?;
        st.end()
    }
}

/// A structured tool error: `{"code": "..."}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolError {
    /// The fixed code.
    pub code: ErrorCode,
}

/// The arguments of `history_status`: none, an empty object ([`parse_status_request`] refuses
/// anything else). Its JSON Schema is [`history_status_input_schema`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct StatusRequest {}

/// The closed input schema of `history_status`, derived from [`StatusRequest`]: an empty
/// object.
pub fn history_status_input_schema() -> Value {
    input_schema_for::<StatusRequest>()
}

/// The output schema of `history_status` (MCP `outputSchema`): exactly the contract's 11
/// fields of [`StatusResponse`], each typed, `health` one of the fixed categories.
pub fn history_status_output_schema() -> Value {
    let health: Vec<&str> = HealthCategory::ALL.iter().map(|h| h.as_str()).collect();
    serde_json::json!({
        "type": "object",
        "properties": {
            "supported": { "type": "boolean" },
            "admitted": { "type": "boolean" },
            "enabled": { "type": "boolean" },
            "paused": { "type": "boolean" },
            "encrypted": { "type": "boolean" },
            "profile": { "type": "string" },
            "retention_days": { "type": "integer", "minimum": 0 },
            "quota_bytes": { "type": "integer", "minimum": 0 },
            "bytes_used": { "type": "integer", "minimum": 0 },
            "dropped_events": { "type": "integer", "minimum": 0 },
            "health": { "enum": health }
        },
        "required": [
            "supported", "admitted", "enabled", "paused", "encrypted", "profile",
            "retention_days", "quota_bytes", "bytes_used", "dropped_events", "health"
        ],
        "additionalProperties": false
    })
}

/// The output schema of `history_query` as the contract has it ([`QueryResponse`]): the events
/// (the contract's CloudEvents objects, oldest first) and the two disclosure flags, always
/// `true`.
pub fn history_query_output_schema() -> Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "events": {
                "type": "array",
                "maxItems": QUERY_LIMIT_MAX_EVENTS,
                "items": {
                    "type": "object",
                    "required": ["specversion", "id", "source", "type", "subject", "time", "data"]
                }
            },
            "metadata_only": { "const": true },
            "model_context_disclosure": { "const": true }
        },
        "required": ["events", "metadata_only", "model_context_disclosure"],
        "additionalProperties": false
    })
}

/// The closed input schema of `history_query`, derived from [`QueryRequest`]: `limit`,
/// `session_id`, `since_sequence` and `until_sequence`, each optional, with their bounds, and
/// `additionalProperties: false`.
pub fn history_query_input_schema() -> Value {
    input_schema_for::<QueryRequest>()
}

/// The input schema (MCP `inputSchema`) of a tool whose arguments are `T`, as schemars derives
/// it, in the form MCP clients are shown:
///
/// - inline, with no `$schema`, `title` or `description` at the root (the tool's own
///   description says what it does; a field's description stays);
/// - an `Option` field is optional and never `null` (`type` without `"null"`): annal's parsers
///   refuse `null` ([`QueryRequest::parse`]);
/// - no `format` (schemars names the Rust integer width, `uint8`; the bounds say what is
///   allowed);
/// - `properties` always present, empty for arguments without fields (schemars leaves it out;
///   some clients require it, and it is what MCP clients were always shown).
pub fn input_schema_for<T: JsonSchema>() -> Value {
    let settings = schemars::generate::SchemaSettings::draft2020_12()
        .with(|settings| settings.meta_schema = None)
        .with_transform(schemars::transform::RecursiveTransform(
            |schema: &mut schemars::Schema| {
                schema.remove("format");
                if let Some(Value::Array(types)) = schema.get_mut("type") {
                    types.retain(|t| t != "null");
                    if let [only] = types.as_slice() {
                        let only = only.clone();
                        schema.insert("type".into(), only);
                    }
                }
            },
        ));
    let mut schema = settings.into_generator().into_root_schema_for::<T>();
    for key in ["title", "description"] {
        schema.remove(key);
    }
    if schema.get("properties").is_none() {
        schema.insert("properties".into(), Value::Object(Map::new()));
    }
    schema.to_value()
}
