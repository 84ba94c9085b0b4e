//! The daemon's wire protocol: length-prefixed JSON frames carrying one closed request enum and
//! one reply shape. `docs/protocol.md` is the reference for clients in other languages.
//!
//! A frame is a 4-byte big-endian length `N` (1 ..= [`MAX_FRAME_BYTES`]) followed by `N` bytes
//! of one UTF-8 JSON object. Each request frame gets exactly one reply frame, in order. Frames
//! are read and written by [`FrameCodec`] (tokio-util's `LengthDelimitedCodec`, configured for
//! this protocol) over a [`FramedStream`].
//!
//! The frame layer lives in `frame.rs` (re-exported here); this file holds the requests, the
//! replies and their errors.
//!
//! [`decode_request`] refuses a key given twice in any object, and its errors name a field of
//! the closed schema ([`FIELD_NAMES`]) or say "an unknown field": never a caller's text.

use annal_schema::{
    Application, Capability, Delivery, Effect, EscalationKind, EvidenceKind, Route,
};
use serde::{Deserialize, Serialize};

mod frame;
pub use frame::{FrameCodec, FrameError, FramedStream, next_frame, read_frame, send_frame};

/// Events a `preflight` request reads when it names no `limit`.
pub const PREFLIGHT_DEFAULT_LIMIT_EVENTS: u8 = 20;

/// Version of this protocol, answered by `hello`. A client that needs a newer one says so.
pub const PROTOCOL_VERSION: u32 = 1;

/// Largest frame body either side sends or accepts, in bytes. A manifest
/// (`MANIFEST_MAX_LEN_BYTES`, 16 KiB) fits with room to spare; a query answer of 200 events
/// (about 1 KiB each) does too.
pub const MAX_FRAME_BYTES: usize = 512 * 1024;

/// Bytes of the length prefix.
pub const FRAME_HEADER_BYTES: usize = 4;

const _: () = assert!(MAX_FRAME_BYTES <= u32::MAX as usize);
const _: () = assert!(
    annal_engine::policy::manifest::MANIFEST_MAX_LEN_BYTES * 2 < MAX_FRAME_BYTES,
    "a manifest, JSON-escaped, must fit one request frame"
);

/// One request. Closed: an unknown `op` or an unknown field is refused (`unknown_request`,
/// `invalid_request`) and the connection goes on. Requests without arguments are empty struct
/// variants (`Status {}`), so that `deny_unknown_fields` refuses extra fields on them too.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum Request {
    /// Which protocol and key store the daemon has.
    Hello {},
    /// The contract's status.
    Status {},
    /// The owner's opt-in.
    Enable {},
    /// The owner's opt-out (capture stops; history stays).
    Disable {},
    /// Pause capture.
    Pause {},
    /// Resume capture.
    Resume {},
    /// Make everything captured so far durable.
    Flush {},
    /// The owner's read (`local_cli`): the `history_query` arguments, narrowed by the owner's
    /// filters (each optional; absent fields are not sent, so an older daemon reads an
    /// unfiltered request as before). Agents' `call_tool` takes none of them.
    Query {
        /// The tool's arguments (`limit`, `session_id`, `since_sequence`, `until_sequence`).
        #[serde(default)]
        arguments: serde_json::Map<String, serde_json::Value>,
        /// Only events at or after this time, in ms since the epoch.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        since_ms: Option<u64>,
        /// Only events at or before this time, in ms since the epoch (not before `since_ms`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        until_ms: Option<u64>,
        /// Only events of this application: its bundle id or display name, ignoring case.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        app: Option<String>,
        /// Only events of this capability, ignoring case.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        capability: Option<String>,
        /// Only `action_completed` events with this `effect`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        outcome: Option<Effect>,
        /// Only events whose capability, bundle id or display name holds this text, ignoring
        /// case (`annal search`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
    },
    /// The tools `actor` may call now.
    ToolsFor {
        /// The agent's id.
        actor: String,
    },
    /// One tool call by `actor`, through the policy gate.
    CallTool {
        /// The agent's id.
        actor: String,
        /// `history_status` or `history_query`.
        tool: String,
        /// The tool's arguments.
        #[serde(default)]
        arguments: serde_json::Map<String, serde_json::Value>,
    },
    /// A host's preflight for `actor` (`Engine::preflight`): status, then the newest `limit`
    /// events (default [`PREFLIGHT_DEFAULT_LIMIT_EVENTS`]) of `session_id` when given, each
    /// through the policy gate, and the consultation verdict.
    Preflight {
        /// The agent's id.
        actor: String,
        /// Newest events to read (1..=200).
        #[serde(default)]
        limit: Option<u8>,
        /// Only this session's events (the keyed id `history_query` takes).
        #[serde(default)]
        session_id: Option<String>,
    },
    /// Set query-visible retention (the owner's; durable before the reply).
    SetRetention {
        /// In days (1..=3650).
        days: u32,
    },
    /// Set the encrypted-byte quota and what capture does at it (the owner's; durable before
    /// the reply).
    SetQuota {
        /// In bytes (1048576..=1099511627776).
        bytes: u64,
        /// `stop_capture` (the default) or `evict_oldest`.
        #[serde(default)]
        on_quota: annal_engine::journal::OnQuota,
    },
    /// Grant `operation` (`status` or `query`) to `actor`.
    Grant {
        /// The agent's id.
        actor: String,
        /// `status` or `query`.
        operation: String,
        /// Absolute lifetime in seconds (default one hour).
        #[serde(default)]
        expires_after_secs: Option<u64>,
        /// Idle timeout in seconds (default ten minutes).
        #[serde(default)]
        idle_timeout_secs: Option<u64>,
    },
    /// Approve a bounded-mode manifest (its YAML or JSON text) for `actor`. For an actor the
    /// owner revoked it grants nothing unless `reapprove` (the owner lifts the revocation on
    /// purpose: `annal mcp --reapprove`).
    ApproveManifest {
        /// The agent's id.
        actor: String,
        /// The manifest's text.
        manifest: String,
        /// Approve it again for a revoked actor (default `false`).
        #[serde(default)]
        reapprove: bool,
    },
    /// The grants in force and the revoked actors (the owner's `annal grants`).
    Grants,
    /// The audit trail, one entry per gated call, oldest first (the owner's `annal audit`).
    Audit {
        /// Only this agent's calls.
        #[serde(default)]
        actor: Option<String>,
        /// Only calls decided at or after this time, in ms since the epoch.
        #[serde(default)]
        since_ms: Option<u64>,
        /// Only calls the gate denied.
        #[serde(default)]
        denied: bool,
    },
    /// The audit trail folded per actor (the owner's report): calls, denials, events
    /// returned, first and last call; bounded however long the trail is.
    AuditSummary {
        /// Only calls decided at or after this time, in ms since the epoch.
        #[serde(default)]
        since_ms: Option<u64>,
    },
    /// Revoke every grant of `actor`.
    Revoke {
        /// The agent's id.
        actor: String,
    },
    /// Turn every agent off (`false`) or back on (`true`).
    SwitchAgents {
        /// Agents may be allowed again.
        enabled: bool,
    },
    /// Whether the owner's own reads append the contract's `access` event (default `true`).
    SetOwnerAccess {
        /// They do.
        enabled: bool,
    },
    /// The owner's export (`annal export`), recorded in the audit journal once its archive's
    /// content was read (`owner_exported`; durable before the reply).
    RecordExport {
        /// Events in the archive.
        events: u64,
        /// The first event's `data.sequence` (0 when there is none).
        first_sequence: u64,
        /// The last event's `data.sequence` (0 when there is none).
        last_sequence: u64,
        /// Encrypted to age recipients (`false`: `--plaintext`).
        encrypted: bool,
    },
    /// A driver session starts (capture). The raw label stays in the daemon's memory.
    SessionStarted {
        /// The raw session label (never written).
        session: String,
    },
    /// A driver session ends (capture).
    SessionEnded {
        /// The label given to `session_started` on this connection.
        session: String,
    },
    /// An action starts (capture); the reply carries the action handle to complete it with.
    ActionStarted {
        /// The Cua capability (`[a-z0-9._-]`, starting with a letter: checked with the write
        /// rules, never the lenient read rules stored events are read with).
        capability: String,
        /// The target application, when known.
        #[serde(default)]
        application: Option<WireApplication>,
        /// The session (a label started on this connection), when any.
        #[serde(default)]
        session: Option<String>,
    },
    /// An action completes (capture).
    ActionCompleted {
        /// The handle `action_started` answered.
        action: u64,
        /// What it achieved.
        outcome: WireOutcome,
    },
    /// Shut the daemon down (bounded drain).
    Stop {},
}

impl Request {
    /// An owner's `query` taken apart: its `history_query` arguments and its owner's filter;
    /// any other request is given back (boxed: a request is large).
    pub fn into_owner_query(
        self,
    ) -> Result<
        (
            serde_json::Map<String, serde_json::Value>,
            annal_engine::query::OwnerFilterParts,
        ),
        Box<Self>,
    > {
        match self {
            Self::Query {
                arguments,
                since_ms,
                until_ms,
                app,
                capability,
                outcome,
                text,
            } => Ok((
                arguments,
                annal_engine::query::OwnerFilterParts {
                    since_ms,
                    until_ms,
                    application: app,
                    capability,
                    outcome,
                    text,
                },
            )),
            other => Err(Box::new(other)),
        }
    }

    /// Whether this is capture (a session's or an action's start or end): the hook's wire
    /// form, which gets no span of its own, as the hook gets none.
    pub fn is_capture(&self) -> bool {
        matches!(
            self,
            Self::SessionStarted { .. }
                | Self::SessionEnded { .. }
                | Self::ActionStarted { .. }
                | Self::ActionCompleted { .. }
        )
    }

    /// The request's `op`, one of [`KNOWN_OPS`] (what a span of it may name).
    pub fn op(&self) -> &'static str {
        match self {
            Self::Hello { .. } => "hello",
            Self::Status { .. } => "status",
            Self::Enable { .. } => "enable",
            Self::Disable { .. } => "disable",
            Self::Pause { .. } => "pause",
            Self::Resume { .. } => "resume",
            Self::Flush { .. } => "flush",
            Self::Query { .. } => "query",
            Self::ToolsFor { .. } => "tools_for",
            Self::CallTool { .. } => "call_tool",
            Self::Preflight { .. } => "preflight",
            Self::SetRetention { .. } => "set_retention",
            Self::SetQuota { .. } => "set_quota",
            Self::Grant { .. } => "grant",
            Self::ApproveManifest { .. } => "approve_manifest",
            Self::Grants => "grants",
            Self::Audit { .. } => "audit",
            Self::AuditSummary { .. } => "audit_summary",
            Self::Revoke { .. } => "revoke",
            Self::SwitchAgents { .. } => "switch_agents",
            Self::SetOwnerAccess { .. } => "set_owner_access",
            Self::RecordExport { .. } => "record_export",
            Self::SessionStarted { .. } => "session_started",
            Self::SessionEnded { .. } => "session_ended",
            Self::ActionStarted { .. } => "action_started",
            Self::ActionCompleted { .. } => "action_completed",
            Self::Stop { .. } => "stop",
        }
    }

    /// An owner's `query` of `arguments`, with no filter.
    pub fn query(arguments: serde_json::Map<String, serde_json::Value>) -> Self {
        Self::Query {
            arguments,
            since_ms: None,
            until_ms: None,
            app: None,
            capability: None,
            outcome: None,
            text: None,
        }
    }
}

/// An application's identity on the wire: the contract's two fields, closed, checked with the
/// write rules when the action is captured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireApplication {
    /// The platform application identifier (`BundleId`'s write rules).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle_id: Option<String>,
    /// The human-facing application name (`DisplayName`'s write rules).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
}

impl WireApplication {
    /// The validated identity, or the name of the field the write rules refuse.
    pub fn into_application(self) -> Result<Application, &'static str> {
        Application::from_names(self.bundle_id, self.display_name)
            .map_err(annal_schema::InvalidApplication::field)
    }
}

/// The capability of an `action_started`, checked with the write rules.
pub fn capability(text: String) -> Result<Capability, &'static str> {
    Capability::new(text).map_err(|_| "capability")
}

/// An action's outcome on the wire: the contract's fields, closed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireOutcome {
    /// What the action achieved.
    pub effect: Effect,
    /// How input reached the target.
    pub route: Route,
    /// Background or foreground delivery, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<Delivery>,
    /// Units delivered, when counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivered_count: Option<u32>,
    /// Which read-backs confirmed the effect.
    #[serde(default)]
    pub evidence_kinds: Vec<EvidenceKind>,
    /// What a caller could do next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalation_kind: Option<EscalationKind>,
}

impl WireOutcome {
    /// The validated outcome; `None` when it lists too many evidence kinds.
    pub fn into_outcome(self) -> Option<annal_schema::ActionOutcome> {
        Some(annal_schema::ActionOutcome {
            effect: self.effect,
            route: self.route,
            delivery: self.delivery,
            delivered_count: self.delivered_count,
            evidence_kinds: annal_schema::EvidenceKinds::new(self.evidence_kinds)?,
            escalation_kind: self.escalation_kind,
        })
    }
}

/// The fixed codes of a daemon error. Stable wire strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DaemonErrorCode {
    /// The frame body is not one UTF-8 JSON object.
    MalformedFrame,
    /// The frame's length is 0 or above `MAX_FRAME_BYTES`; the daemon closes the connection
    /// (it cannot find the next frame).
    FrameTooLarge,
    /// The `op` is not one of the protocol's requests.
    UnknownRequest,
    /// A field is missing, unknown or out of range.
    InvalidRequest,
    /// The peer runs as another user; the daemon closes the connection.
    PeerNotOwner,
    /// The daemon serves as many connections as it allows; try again later.
    TooManyConnections,
    /// This connection holds as many open actions or sessions as it may.
    TooManyOpen,
    /// No open action or session of this connection has that handle or label.
    UnknownHandle,
    /// The engine did not answer, or the operation failed (the message says which).
    OperationFailed,
}

impl DaemonErrorCode {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::MalformedFrame => "malformed_frame",
            Self::FrameTooLarge => "frame_too_large",
            Self::UnknownRequest => "unknown_request",
            Self::InvalidRequest => "invalid_request",
            Self::PeerNotOwner => "peer_not_owner",
            Self::TooManyConnections => "too_many_connections",
            Self::TooManyOpen => "too_many_open",
            Self::UnknownHandle => "unknown_handle",
            Self::OperationFailed => "operation_failed",
        }
    }
}

/// A daemon error: its fixed code and one line for a person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message} ({})", code.as_str())]
pub struct DaemonError {
    /// The fixed code.
    pub code: DaemonErrorCode,
    /// What went wrong and, where there is one, the fix. Never carries a stored value.
    pub message: String,
}

impl DaemonError {
    /// An error with `code` and `message`.
    pub fn new(code: DaemonErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// One reply: `{"ok": <result>}` or `{"error": {"code": ..., "message": ...}}`.
///
/// `T` is the result's type: a JSON value by default; a client that knows the request's
/// answer reads it as its type straight from the frame (`DaemonClient::request_as`), with no
/// JSON tree between.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Reply<T = serde_json::Value> {
    /// The request's result (its shape per request is in `docs/protocol.md`).
    Ok(T),
    /// Why the request failed.
    Error(DaemonError),
}

/// The result of a tool call or an owner's query (`call_tool`, `query`): the answer, or the
/// refusal with its fixed code. On the wire `{"answer": ...}` or `{"refusal": {"code": ...}}`
/// (`docs/protocol.md`); the server writes this type and the CLI and the MCP bridge read it
/// back as this type, so the shape lives in one place. Reading refuses anything else: another
/// key, both keys, or a code that is not one of annal's.
///
/// `A` is the answer's type: a JSON value by default, or a typed answer read straight from
/// the frame (`annal report` reads its pages' events as [`annal_schema::Event`]s).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ToolReply<A = serde_json::Value> {
    /// The structured result: the contract's fields, plus `has_more` and `cursor` when another
    /// page exists (a status, a query page, or an owner's `{"events": [...]}`).
    Answer(A),
    /// Why nothing was returned.
    Refusal(#[serde(with = "refusal_object")] annal_engine::policy::Refusal),
}

impl ToolReply {
    /// A reply's JSON value (what the server puts under `ok`).
    pub fn to_value(&self) -> serde_json::Value {
        match self {
            Self::Answer(answer) => serde_json::json!({ "answer": answer }),
            Self::Refusal(refusal) => serde_json::json!({ "refusal": refusal }),
        }
    }

    /// [`Self::to_value`], moving the answer in rather than copying it (a query page's events).
    pub fn into_value(self) -> serde_json::Value {
        match self {
            Self::Answer(answer) => {
                let mut object = serde_json::Map::with_capacity(1);
                object.insert("answer".to_owned(), answer);
                serde_json::Value::Object(object)
            }
            refusal @ Self::Refusal(_) => refusal.to_value(),
        }
    }

    /// Reads a reply's `ok` value; `None` when it is not one.
    pub fn from_value(value: serde_json::Value) -> Option<Self> {
        serde_json::from_value(value).ok()
    }
}

/// A refusal on the wire: `{"code": "..."}`, one of [`Refusal::from_code`]'s codes.
///
/// [`Refusal::from_code`]: annal_engine::policy::Refusal::from_code
mod refusal_object {
    use annal_engine::policy::Refusal;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Wire {
        code: String,
    }

    pub(super) fn serialize<S: Serializer>(refusal: &Refusal, s: S) -> Result<S::Ok, S::Error> {
        refusal.serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Refusal, D::Error> {
        let wire = Wire::deserialize(d)?;
        Refusal::from_code(&wire.code)
            .ok_or_else(|| serde::de::Error::custom("`code` is not one of annal's refusal codes"))
    }
}

/// Decodes one request body: a typed error naming what is wrong, never a value or a name the
/// caller chose. A key given twice in any object of the body (`{"actor":"a","actor":"b"}`) is
/// refused, at every depth: JSON leaves duplicates undefined and a reader that keeps the last
/// one would act on a field the caller's own checks may have read differently.
pub fn decode_request(body: &[u8]) -> Result<Request, DaemonError> {
    let malformed = || {
        DaemonError::new(
            DaemonErrorCode::MalformedFrame,
            "the frame is not one JSON object",
        )
    };
    let mut duplicate = None;
    let value = {
        let mut reader = serde_json::Deserializer::from_slice(body);
        let parsed = serde::de::DeserializeSeed::deserialize(
            UniqueKeys {
                duplicate: &mut duplicate,
            },
            &mut reader,
        )
        .and_then(|value| reader.end().map(|()| value));
        match (parsed, duplicate) {
            (Ok(value), _) => value,
            (Err(_), Some(key)) => {
                return Err(DaemonError::new(
                    DaemonErrorCode::InvalidRequest,
                    format!(
                        "{} is given twice in one object; give each field once",
                        field_name(&key)
                    ),
                ));
            }
            (Err(_), None) => return Err(malformed()),
        }
    };
    let Some(object) = value.as_object() else {
        return Err(malformed());
    };
    let op = object
        .get("op")
        .and_then(|op| op.as_str())
        .and_then(|op| KNOWN_OPS.iter().find(|known| **known == op).copied());
    let Some(op) = op else {
        return Err(DaemonError::new(
            DaemonErrorCode::UnknownRequest,
            format!(
                "the request's \"op\" must be one of: {}",
                KNOWN_OPS.join(", ")
            ),
        ));
    };
    serde_json::from_value(value.clone()).map_err(|e| {
        let problem = field_problem(&e).unwrap_or_else(|| match wrong_field(&value) {
            Some(name) => format!(
                "{} has the wrong type or is out of range",
                field_name(&name)
            ),
            None => "a field has the wrong type or is out of range".to_owned(),
        });
        DaemonError::new(
            DaemonErrorCode::InvalidRequest,
            format!("invalid \"{op}\" request: {problem}"),
        )
    })
}

/// The top-level field of `request` (an object that does not decode) whose value has the wrong
/// type or is out of range: the first whose removal makes that error go (a request without it
/// decodes, or only misses it). A type error is met while the fields are read, before any
/// missing field is noticed, so the field it goes with is the culprit.
fn wrong_field(request: &serde_json::Value) -> Option<String> {
    let object = request.as_object()?;
    object.keys().filter(|key| *key != "op").find_map(|key| {
        let mut without = object.clone();
        without.remove(key);
        match serde_json::from_value::<Request>(serde_json::Value::Object(without)) {
            Ok(_) => Some(key.clone()),
            Err(error) if field_problem(&error).is_some() => Some(key.clone()),
            Err(_) => None,
        }
    })
}

/// Reads one JSON value as [`serde_json::Value`] does, but fails at the first object that gives
/// a key twice, and keeps that key (for [`field_name`], never for a message as it is).
struct UniqueKeys<'a> {
    /// The first key found twice.
    duplicate: &'a mut Option<String>,
}

impl<'de> serde::de::DeserializeSeed<'de> for UniqueKeys<'_> {
    type Value = serde_json::Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for UniqueKeys<'_> {
    type Value = serde_json::Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(v.into())
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(serde_json::Value::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(UniqueKeys {
            duplicate: &mut *self.duplicate,
        })? {
            items.push(item);
        }
        Ok(serde_json::Value::Array(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if object.contains_key(&key) {
                *self.duplicate = Some(key);
                return Err(serde::de::Error::custom("a key is given twice"));
            }
            let value = map.next_value_seed(UniqueKeys {
                duplicate: &mut *self.duplicate,
            })?;
            object.insert(key, value);
        }
        Ok(serde_json::Value::Object(object))
    }
}

/// Every field name of the closed request schema: the requests' fields, an application's and an
/// outcome's, and the `history_query` arguments. A name outside this list is never quoted.
pub const FIELD_NAMES: [&str; 40] = [
    "op",
    "since_ms",
    "until_ms",
    "app",
    "text",
    "denied",
    "reapprove",
    "arguments",
    "actor",
    "tool",
    "days",
    "bytes",
    "on_quota",
    "operation",
    "expires_after_secs",
    "idle_timeout_secs",
    "manifest",
    "enabled",
    "session",
    "capability",
    "application",
    "bundle_id",
    "display_name",
    "action",
    "outcome",
    "effect",
    "route",
    "delivery",
    "delivered_count",
    "evidence_kinds",
    "escalation_kind",
    "limit",
    "session_id",
    "since_sequence",
    "until_sequence",
    "cursor",
    "events",
    "first_sequence",
    "last_sequence",
    "encrypted",
];

/// How a message names `key`: `the field "x"` when `x` is a field of the closed schema, else
/// `an unknown field` (a caller's text is never quoted).
pub fn field_name(key: &str) -> String {
    if FIELD_NAMES.contains(&key) {
        format!("the field \"{key}\"")
    } else {
        "an unknown field".to_owned()
    }
}

/// Every `op` the protocol knows.
pub const KNOWN_OPS: [&str; 27] = [
    "hello",
    "status",
    "enable",
    "disable",
    "pause",
    "resume",
    "flush",
    "set_retention",
    "set_quota",
    "query",
    "tools_for",
    "call_tool",
    "preflight",
    "grants",
    "audit",
    "audit_summary",
    "grant",
    "approve_manifest",
    "revoke",
    "switch_agents",
    "set_owner_access",
    "record_export",
    "session_started",
    "session_ended",
    "action_started",
    "action_completed",
    "stop",
];

/// What serde says is wrong, without any value or name the caller chose: a missing field is
/// named (serde names it from the schema), an unknown one is "an unknown field", anything else
/// is a field of the wrong type or out of range.
fn field_problem(error: &serde_json::Error) -> Option<String> {
    let text = error.to_string();
    if text.starts_with("unknown field") {
        return Some(
            "an unknown field is given; see docs/protocol.md for this request's fields".to_owned(),
        );
    }
    for prefix in ["missing field", "duplicate field"] {
        if let Some(rest) = text.strip_prefix(prefix) {
            let name: String = rest
                .trim_start()
                .trim_start_matches('`')
                .chars()
                .take_while(|c| *c != '`')
                .collect();
            let what = if prefix == "missing field" {
                "is missing"
            } else {
                "is given twice"
            };
            return Some(format!("{} {what}", field_name(&name)));
        }
    }
    None
}

#[cfg(test)]
mod tests;
